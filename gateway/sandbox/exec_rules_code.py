"""Exec mediation's rules about programs that run other code: shells given code as text
(``bash -c``, ``eval``, ``su -c``, ``watch``), interpreter one-liners (``python -c``, ``perl -e``
...), and ``nc``/``socat`` handing a network connection to a program; plus the rules over raw
text that such code is read with (fork bombs, reverse shells, credential paths). Code given as
text is analysed in turn through the `FindingSink`."""

from __future__ import annotations

import bisect
import re

from gateway.sandbox.danger_targets import credential_label
from gateway.sandbox.exec_finding_kinds import CREDENTIALS, FORK_BOMB, INLINE_CODE, REVERSE_SHELL
from gateway.sandbox.risk import FindingSink, RiskTier

# Rules over raw text run on whitespace-compacted text and are built so that no pattern can
# backtrack badly (classification runs on the event loop, on text the model controls).
_FUNCTION_OPEN = re.compile(r"\( ?\) ?\{|\bfunction (?P<name>[^\s(){}<>;&|'\"]+) ?(?:\( ?\) ?)?\{")
_WORD = re.compile(r"[^\s(){}<>;&|'\"]+")
_SELF_FORK = re.compile(
    r"\$0 ?[|&] ?\$0|\bfork ?(?:\( ?\))? ?while\b|while ?\(? ?(?:1|true) ?\)? ?[:{]? ?(?:os\.)?fork ?\(",
    re.IGNORECASE,
)
_SOCKET_CODE = re.compile(r"socket|fsockopen|TCPSocket|net\.connect|net\.Socket|IO::Socket|/dev/tcp/", re.I)
_EXEC_CODE = re.compile(
    r"dup2|pty\.spawn|subprocess|\bexec|\bsystem|/bin/(?:ba)?sh|spawn|popen|child_process"
)
_SHELL_CALL = re.compile(r"system|popen|subprocess|exec|spawn|`")
_STRING_LITERAL = re.compile(r"'([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\"")
_CODE_FLAGS = {"-c", "-e", "-E", "-r", "--eval", "-p", "--print"}


def _self_forking_functions(text: str) -> list[str]:
    """Names of functions defined in `text` whose body calls the function and backgrounds (``&``).

    ``name() { body }`` and ``function name { body }``; a body ends at the next ``}``. Word, brace
    and ampersand positions are indexed once, so each definition costs a few bisections.
    """
    words: dict[str, list[int]] = {}
    word_ends: dict[int, str] = {}
    for match in _WORD.finditer(text):
        words.setdefault(match.group(), []).append(match.start())
        word_ends[match.end()] = match.group()
    closes = [index for index, char in enumerate(text) if char == "}"]
    amps = [index for index, char in enumerate(text) if char == "&"]
    found: list[str] = []
    for match in _FUNCTION_OPEN.finditer(text):
        name = match.group("name") or word_ends.get(match.start()) or word_ends.get(match.start() - 1)
        if name is None:
            continue
        body = match.end()
        nxt = bisect.bisect_left(closes, body)
        body_end = closes[nxt] if nxt < len(closes) else len(text)
        amp = bisect.bisect_left(amps, body)
        calls = words.get(name, [])
        call = bisect.bisect_left(calls, body)
        if amp < len(amps) and amps[amp] < body_end and call < len(calls) and calls[call] < body_end:
            found.append(name)
    return found


def text_rules(sink: FindingSink, text: str) -> None:
    """Rules over a command line's raw text: fork bombs in any of their spellings."""
    text = re.sub(r"\s+", " ", text)
    for name in dict.fromkeys(_self_forking_functions(text)):
        reason = f"fork bomb: function {name} keeps starting copies of itself"
        sink.add(RiskTier.CRITICAL, FORK_BOMB, reason)
    if _SELF_FORK.search(text):
        sink.add(RiskTier.CRITICAL, FORK_BOMB, "fork bomb: a process that keeps forking itself")


def code_rules(sink: FindingSink, interpreter: str, code: str) -> None:
    """Rules over an interpreter one-liner (``python -c``, ``perl -e`` ...)."""
    text_rules(sink, code)
    code = re.sub(r"\s+", " ", code)
    if _SOCKET_CODE.search(code) and _EXEC_CODE.search(code):
        sink.add(RiskTier.HIGH, REVERSE_SHELL, f"{interpreter} one-liner connects a socket to a shell")
    for word in re.split(r"[\s'\"(),;]+", code):
        label = credential_label(word)
        if label:
            sink.add(RiskTier.HIGH, CREDENTIALS, f"{interpreter} one-liner touches {label} ({word})")
    if _SHELL_CALL.search(code):
        for match in _STRING_LITERAL.finditer(code):
            literal = match.group(1) if match.group(1) is not None else match.group(2)
            if literal and " " in literal:
                sink.analyze_text(literal)


def netcat_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    for arg in args:
        long_exec = arg.split("=", 1)[0] in ("--exec", "--sh-exec", "--lua-exec")
        short_exec = re.fullmatch(r"-[A-Za-z]*[ec].*", arg) is not None and not arg.startswith("--")
        if long_exec or short_exec:
            sink.add(RiskTier.HIGH, REVERSE_SHELL, f"{name} {arg} hands a network connection to a program")
            return


def socat_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    if any(re.search(r"(?i)(?:^|[,!])(?:exec|system):", arg) for arg in args):
        sink.add(RiskTier.HIGH, REVERSE_SHELL, "socat connects a network address to a program")


def _inline_shell(sink: FindingSink, name: str, code: str) -> None:
    reason = f"{name} runs shell code given as text, which exec mediation reads but cannot vouch for"
    sink.add(RiskTier.HIGH, INLINE_CODE, reason)
    sink.analyze_text(code)


def shell_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    """``bash -c STRING``: analyse STRING as a command line."""
    index = 0
    wants_string = False
    while index < len(args):
        arg = args[index]
        if arg in ("-o", "+o", "-O", "+O"):
            index += 2
            continue
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            wants_string = True
        elif not arg.startswith(("-", "+")):
            if wants_string:
                _inline_shell(sink, name, arg)
            return
        index += 1
    if wants_string:
        _inline_shell(sink, name, "")


def eval_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    _inline_shell(sink, name, " ".join(args))


def su_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    for index, arg in enumerate(args):
        if arg in ("-c", "--command") and index + 1 < len(args):
            _inline_shell(sink, name, args[index + 1])
        elif arg.startswith("--command="):
            _inline_shell(sink, name, arg.split("=", 1)[1])


def watch_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-n", "--interval", "-d", "--differences") else 1
    if index < len(args):
        _inline_shell(sink, name, " ".join(args[index:]))


def interpreter_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    for index, arg in enumerate(args):
        if (arg in _CODE_FLAGS or (arg.startswith("-") and arg[-1:] in "ce" and len(arg) > 2
                                   and not arg.startswith("--"))) and index + 1 < len(args):  # fmt: skip
            reason = f"{name} runs code given inline ({arg}), which exec mediation cannot follow"
            sink.add(RiskTier.HIGH, INLINE_CODE, reason)
            code_rules(sink, name, args[index + 1])
            return
