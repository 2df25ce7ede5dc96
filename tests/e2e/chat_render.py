"""HTML pictures of chat messages as the Discord and Slack stand-ins stored them.

A test hands over the message a stand-in received from the daemon (Discord: the message object
with `content`, `embeds`, `attachments` and `components`; Slack: the message with its Block Kit
`blocks`) and gets back a self-contained page laid out the way the two clients show such a
message: author line, formatted text, embed and section fields, buttons in their styles. The
layout only approximates the clients. Everything visible in the payload is drawn from the
payload; an element this renderer does not know is drawn as a plain note naming its type, so a
picture never hides part of what was posted. Slack's top-level `text` is the notification
fallback of a message with blocks, which the client does not show, so it is drawn only when
there are no blocks.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Any

DISCORD_BUTTON_STYLES = {1: "primary", 2: "secondary", 3: "success", 4: "danger", 5: "link", 6: "premium"}
"""Discord's button `style` numbers, as the class names the page gives them."""

DISCORD_COMPONENT_NAMES = {3: "string select", 4: "text input", 5: "user select", 6: "role select"}

_DISCORD_METADATA = {
    "id", "channel_id", "guild_id", "author", "type", "nonce", "enforce_nonce", "mentions",
    "mention_roles", "mention_everyone", "message_reference", "timestamp", "edited_timestamp",
    "tts", "flags", "pinned", "webhook_id", "member",
}  # fmt: skip
"""Keys of a Discord message that the client does not draw as content (the author is the
header)."""

_DISCORD_DRAWN = {"content", "embeds", "attachments", "components"}

_FENCE = re.compile(r"```(?:([\w+-]+)?\n)?(.*?)\n?```", re.DOTALL)
_DISCORD_INLINE = (
    (re.compile(r"`([^`\n]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*(.+?)\*\*", re.DOTALL), r"<strong>\1</strong>"),
    (re.compile(r"__(.+?)__", re.DOTALL), r"<u>\1</u>"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"<em>\1</em>"),
    (re.compile(r"(?<!\w)_(?!\s)(.+?)(?<!\s)_(?!\w)"), r"<em>\1</em>"),
    (re.compile(r"~~(.+?)~~", re.DOTALL), r"<s>\1</s>"),
)
_SLACK_INLINE = (
    (re.compile(r"`([^`\n]+)`"), r"<code>\1</code>"),
    (re.compile(r"(?<!\w)\*(?!\s)(.+?)(?<!\s)\*(?!\w)"), r"<strong>\1</strong>"),
    (re.compile(r"(?<!\w)_(?!\s)(.+?)(?<!\s)_(?!\w)"), r"<em>\1</em>"),
    (re.compile(r"(?<!\w)~(?!\s)(.+?)(?<!\s)~(?!\w)"), r"<s>\1</s>"),
)
_SLACK_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]+))?>")


def note(what: str) -> str:
    """A plain line standing in for an element the renderer does not draw."""
    return f'<div class="unrendered">[not drawn: {html.escape(what)}]</div>'


def markup(text: str, *, slack: bool) -> str:
    """Discord markdown or Slack mrkdwn as HTML: fenced code blocks, inline code, bold, italic,
    strike (and Discord's underline, Slack's `<url|label>` links and mentions)."""
    parts: list[str] = []
    last = 0
    for fence in _FENCE.finditer(text):
        parts.append(_inline(_trim(text[last : fence.start()], after_block=bool(parts)), slack=slack))
        parts.append(f'<pre class="codeblock">{_escape(fence.group(2), slack=slack)}</pre>')
        last = fence.end()
    parts.append(_inline(_trim(text[last:], after_block=bool(parts)), slack=slack))
    return "".join(parts)


def _escape(text: str, *, slack: bool) -> str:
    """Text as HTML. Slack sends `&`, `<` and `>` as entities already (a bare `<` opens a link)."""
    return html.escape(html.unescape(text) if slack else text, quote=False)


def _trim(segment: str, *, after_block: bool) -> str:
    """The line break around a code block belongs to the block, not to the text."""
    if after_block and segment.startswith("\n"):
        segment = segment[1:]
    return segment.removesuffix("\n")


def _inline(segment: str, *, slack: bool) -> str:
    if not segment:
        return ""
    links: list[str] = []
    if slack:
        # Links and mentions become placeholders first, so emphasis may span them.
        def hold(match: re.Match[str]) -> str:
            links.append(_slack_link(match.group(1), match.group(2)))
            return f"\ue000{len(links) - 1}\ue001"

        segment = _SLACK_LINK.sub(hold, segment)
    out = _escape(segment, slack=slack)
    for pattern, replacement in _SLACK_INLINE if slack else _DISCORD_INLINE:
        out = pattern.sub(replacement, out)
    out = re.sub("\ue000(\\d+)\ue001", lambda m: links[int(m.group(1))], out)
    return f'<span class="text">{out}</span>'


def _slack_link(target: str, label: str | None) -> str:
    shown = _escape(label or target, slack=True)
    kind = "mention" if target.startswith(("@", "#", "!")) else "link"
    return f'<span class="{kind}">{shown}</span>'


def _author(name: str, tag: str, when: str = "") -> str:
    initial = html.escape(name[:1].upper() or "?")
    stamp = f'<span class="when">{html.escape(when)}</span>' if when else ""
    return (
        f'<div class="avatar">{initial}</div>'
        f'<div class="header"><span class="name">{html.escape(name)}</span>'
        f'<span class="tag">{tag}</span>{stamp}</div>'
    )


_EDITED = '<div class="edited">(edited)</div>'
"""Both clients mark an edited message after its content."""


def discord_page(message: dict[str, Any], *, edited: bool = False) -> str:
    """A page with one Discord message, dark theme. `edited`: the message was edited since it
    was posted (the client marks it so)."""
    author = message.get("author") or {}
    name = str(author.get("username") or author.get("id") or "unknown")
    body = [_author(name, "APP" if author.get("bot") else "")]
    if message.get("content"):
        body.append(f'<div class="markup">{markup(str(message["content"]), slack=False)}</div>')
    body.extend(_discord_embed(embed) for embed in message.get("embeds") or [])
    if edited or message.get("edited_timestamp"):
        body.append(_EDITED)
    body.extend(_discord_attachment(item) for item in message.get("attachments") or [])
    body.extend(_discord_component(c) for c in message.get("components") or [])
    for key in sorted(set(message) - _DISCORD_METADATA - _DISCORD_DRAWN):
        if message[key] not in (None, [], {}, ""):
            body.append(note(f"message field {key}"))
    return _page("discord", "".join(body))


def _discord_embed(embed: dict[str, Any]) -> str:
    color = embed.get("color")
    border = f"#{int(color):06x}" if isinstance(color, int) else "#1e1f22"
    parts: list[str] = []
    if (embed.get("author") or {}).get("name"):
        parts.append(f'<div class="embed-author">{html.escape(str(embed["author"]["name"]))}</div>')
    if embed.get("title"):
        parts.append(f'<div class="embed-title">{markup(str(embed["title"]), slack=False)}</div>')
    if embed.get("description"):
        parts.append(f'<div class="markup">{markup(str(embed["description"]), slack=False)}</div>')
    fields = [
        f'<div class="field{" inline" if f.get("inline") else ""}">'
        f'<div class="field-name">{markup(str(f.get("name", "")), slack=False)}</div>'
        f'<div class="field-value">{markup(str(f.get("value", "")), slack=False)}</div></div>'
        for f in embed.get("fields") or []
    ]
    if fields:
        parts.append(f'<div class="fields">{"".join(fields)}</div>')
    for key in ("image", "thumbnail", "video"):
        if embed.get(key):
            parts.append(note(f"embed {key} {(embed[key] or {}).get('url', '')}"))
    if (embed.get("footer") or {}).get("text"):
        parts.append(f'<div class="embed-footer">{html.escape(str(embed["footer"]["text"]))}</div>')
    return f'<div class="embed" style="border-left-color: {border}">{"".join(parts)}</div>'


def _discord_attachment(item: dict[str, Any]) -> str:
    name = html.escape(str(item.get("filename") or "file"))
    size = int(item.get("size") or 0)
    return f'<div class="attachment">{name} <span class="size">{size} bytes</span></div>'


def _discord_component(component: dict[str, Any]) -> str:
    kind = component.get("type")
    if kind == 1:
        inner = "".join(_discord_component(c) for c in component.get("components") or [])
        return f'<div class="row">{inner}</div>'
    if kind == 2:
        style = DISCORD_BUTTON_STYLES.get(int(component.get("style") or 0), "unknown")
        emoji = (component.get("emoji") or {}).get("name") or ""
        label = html.escape(f"{emoji} {component.get('label') or ''}".strip())
        disabled = " disabled" if component.get("disabled") else ""
        arrow = ' <span class="external">↗</span>' if style == "link" else ""
        return f'<button class="button {style}"{disabled}>{label}{arrow}</button>'
    name = DISCORD_COMPONENT_NAMES.get(int(kind or 0), "")
    return note(f"component type {kind} {name}".strip())


def slack_page(message: dict[str, Any], *, edited: bool = False) -> str:
    """A page with one Slack message, light theme. `edited` as for `discord_page`."""
    name = str(message.get("username") or (message.get("bot_profile") or {}).get("name") or "")
    name = name or str(message.get("bot_id") or message.get("user") or "unknown")
    when = _slack_time(str(message.get("ts") or ""))
    body = [_author(name, "APP" if message.get("bot_id") else "", when)]
    blocks = message.get("blocks")
    if blocks:
        body.extend(_slack_block(block) for block in blocks)
    elif message.get("text"):
        body.append(f'<div class="markup">{markup(str(message["text"]), slack=True)}</div>')
    if edited or message.get("edited"):
        body.append(_EDITED)
    for key in ("attachments", "files"):
        if message.get(key):
            body.append(note(f"message field {key}"))
    thread = message.get("thread_ts") and message.get("thread_ts") != message.get("ts")
    header = '<div class="thread-head">Thread</div>' if thread else ""
    return _page("slack", "".join(body), header)


def _slack_time(ts: str) -> str:
    try:
        moment = datetime.fromtimestamp(float(ts), UTC)
    except ValueError:
        return ""
    return moment.strftime("%-I:%M %p")


def _slack_text(text: Any) -> str:
    if not isinstance(text, dict):
        return note("text object")
    raw = str(text.get("text") or "")
    if text.get("type") == "mrkdwn":
        return markup(raw, slack=True)
    return f'<span class="text">{html.escape(raw)}</span>'


def _slack_block(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "section":
        parts = [f'<div class="markup">{_slack_text(block["text"])}</div>'] if block.get("text") else []
        fields = "".join(f'<div class="field">{_slack_text(f)}</div>' for f in block.get("fields") or [])
        if fields:
            parts.append(f'<div class="fields">{fields}</div>')
        if block.get("accessory"):
            parts.append(_slack_element(block["accessory"]))
        return f'<div class="block section">{"".join(parts)}</div>'
    if kind == "actions":
        return f'<div class="row">{"".join(_slack_element(e) for e in block.get("elements") or [])}</div>'
    if kind == "context":
        items = "".join(
            _slack_text(e) if e.get("type") in ("mrkdwn", "plain_text") else note(f"context {e.get('type')}")
            for e in block.get("elements") or []
        )
        return f'<div class="block context">{items}</div>'
    if kind == "header":
        return f'<div class="block header-block">{_slack_text(block.get("text"))}</div>'
    if kind == "divider":
        return "<hr>"
    return note(f"block type {kind}")


def _slack_element(element: dict[str, Any]) -> str:
    if element.get("type") != "button":
        return note(f"element type {element.get('type')}")
    style = str(element.get("style") or "default")
    label = html.escape(str((element.get("text") or {}).get("text") or ""))
    return f'<button class="button {html.escape(style)}">{label}</button>'


def _page(theme: str, message: str, header: str = "") -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><style>{_CSS}</style></head>'
        f'<body class="{theme}"><div class="frame">{header}<div class="message">{message}</div>'
        "</div></body></html>"
    )


_CSS = """
* { box-sizing: border-box; }
body { margin: 0; }
.frame { width: 640px; padding: 14px 18px 18px 16px; }
.message { display: grid; grid-template-columns: 40px 1fr; column-gap: 14px; }
.message > :not(.avatar) { grid-column: 2; min-width: 0; }
.avatar { grid-row: 1 / span 20; width: 40px; height: 40px; border-radius: 50%;
  display: flex; align-items: center; justify-content: center; font-weight: 700; font-size: 18px; }
.header { display: flex; align-items: baseline; gap: 6px; margin-bottom: 2px; }
.name { font-weight: 600; }
.tag { font-size: 10px; font-weight: 700; padding: 1px 4px; border-radius: 3px;
  position: relative; top: -1px; }
.tag:empty { display: none; }
.when, .edited { font-size: 12px; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.markup { line-height: 1.375; }
pre.codeblock { margin: 6px 0; padding: 8px 10px; border-radius: 4px; white-space: pre-wrap;
  overflow-wrap: anywhere; font-size: 13px; line-height: 1.4; }
code, pre.codeblock { font-family: "Liberation Mono", "DejaVu Sans Mono", Consolas, monospace; }
code { font-size: 0.85em; padding: 1px 3px; border-radius: 3px; }
.row { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 8px; }
.button { font: inherit; font-size: 14px; font-weight: 500; border: none; cursor: pointer; }
.fields { display: grid; grid-template-columns: 1fr 1fr; gap: 8px 16px; margin-top: 8px; }
.field:not(.inline) { grid-column: 1 / -1; }
.unrendered { font-style: italic; font-size: 13px; margin-top: 6px; }

body.discord { background: #313338; color: #dbdee1;
  font-family: "gg sans", "Noto Sans", "Liberation Sans", Arial, sans-serif; font-size: 16px; }
.discord .avatar { background: #5865f2; color: #fff; }
.discord .name { color: #f2f3f5; }
.discord .tag { background: #5865f2; color: #fff; }
.discord .edited { color: #949ba4; font-size: 10px; }
.edited { margin-top: -2px; }
.discord strong { color: #f2f3f5; }
.discord pre.codeblock { background: #2b2d31; border: 1px solid #1e1f22; color: #dbdee1; }
.discord code { background: #2b2d31; }
.discord .button { height: 32px; padding: 2px 16px; border-radius: 3px; color: #fff; }
.discord .button.primary { background: #5865f2; }
.discord .button.secondary, .discord .button.link { background: #4e5058; }
.discord .button.success { background: #248046; }
.discord .button.danger { background: #da373c; }
.discord .button.unknown { background: #000; outline: 1px dashed #f23f43; }
.discord .button[disabled] { opacity: 0.5; cursor: not-allowed; }
.discord .embed { margin-top: 6px; max-width: 520px; background: #2b2d31; border-left: 4px solid;
  border-radius: 4px; padding: 8px 16px 12px 12px; font-size: 14px; }
.discord .embed-title, .discord .field-name { font-weight: 600; color: #f2f3f5; }
.discord .embed-footer { font-size: 12px; color: #b5bac1; margin-top: 8px; }
.discord .attachment { margin-top: 6px; padding: 10px; background: #2b2d31; border-radius: 8px; }
.discord .unrendered { color: #f0b232; }

body.slack { background: #fff; color: #1d1c1d;
  font-family: Lato, "Liberation Sans", Arial, sans-serif; font-size: 15px; }
.slack .thread-head { font-weight: 900; font-size: 18px; padding: 0 0 10px; margin: 0 -18px 12px -16px;
  padding-left: 16px; border-bottom: 1px solid #e2e2e2; }
.slack .avatar { border-radius: 6px; background: #4a154b; color: #fff; }
.slack .name { font-weight: 900; }
.slack .tag { background: #e8e8e8; color: #616061; }
.slack .when, .slack .edited { color: #616061; }
.slack .markup { line-height: 1.46668; }
.slack pre.codeblock { background: #f8f8f8; border: 1px solid #dddddd; color: #1d1c1d; }
.slack code { color: #c01343; background: #f8f8f8; border: 1px solid #dddddd; }
.slack .mention { color: #1264a3; background: #e8f5fa; }
.slack .link { color: #1264a3; }
.slack .context { font-size: 12px; color: #616061; }
.slack .header-block { font-weight: 900; font-size: 18px; }
.slack .button { height: 28px; padding: 0 12px; border-radius: 4px; font-weight: 700; font-size: 13px;
  background: #fff; color: #1d1c1d; border: 1px solid #bbbabb; }
.slack .button.primary { background: #007a5a; color: #fff; border-color: #007a5a; }
.slack .button.danger { background: #e01e5a; color: #fff; border-color: #e01e5a; }
.slack hr { border: none; border-top: 1px solid #dddddd; margin: 8px 0; }
.slack .unrendered { color: #7a5901; }
"""
