"""The `compact` notation of the recorded pi traces, and a recorder that writes it.

Each agent event becomes one line (`message_end assistant[toolUse]:toolCall(tool-1,echo,{...})`);
markers in angle brackets record what the scenario saw happen (`<llm_call #1 messages=[...]>`,
`<exec_begin {...}>`). Everything is rendered from the events' JSON form, so the lines say exactly
what a wire client would see.
"""

from __future__ import annotations

import json
from typing import Any

from agent_core import AgentEvent, AgentMessage, Context, StreamOptions


def js(value: Any) -> str:
    """JSON as JavaScript's `JSON.stringify` writes it (no spaces, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def normalise(value: Any) -> Any:
    """Replace every `timestamp` value with "<ts>" (the traces were recorded that way)."""
    if isinstance(value, dict):
        return {k: "<ts>" if k == "timestamp" else normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def _block(block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        return f"text({block['text']})"
    if kind == "thinking":
        return f"thinking({block['thinking']})"
    if kind == "toolCall":
        return f"toolCall({block['id']},{block['name']},{js(block['arguments'])})"
    return str(kind)


def message_line(message: dict[str, Any]) -> str:
    role = message["role"]
    if role == "user":
        return f"user:{_text_of(message['content'])}"
    if role == "assistant":
        head = message["stopReason"]
        if message.get("errorMessage"):
            head += f":{message['errorMessage']}"
        return f"assistant[{head}]:" + ",".join(_block(b) for b in message["content"])
    if role == "toolResult":
        flag = "true" if message["isError"] else "false"
        head = f"toolResult({message['toolCallId']},{message['toolName']},isError={flag})"
        return f"{head}:{_text_of(message['content'])}"
    return str(role)


def render(message: AgentMessage) -> str:
    return message_line(message.dump())


def event_line(event: dict[str, Any]) -> str:
    kind = event["type"]
    if kind in ("message_start", "message_end"):
        return f"{kind} {message_line(event['message'])}"
    if kind == "message_update":
        inner = event["assistantMessageEvent"]
        line = f"message_update {inner['type']}"
        if "delta" in inner:
            line += f" {js(inner['delta'])}"
        return f"{line} [ci={inner['contentIndex']}]"
    if kind == "tool_execution_start":
        return f"tool_execution_start {event['toolCallId']} {event['toolName']} {js(event['args'])}"
    if kind == "tool_execution_update":
        partial = event["partialResult"]
        return f"tool_execution_update {event['toolCallId']} {event['toolName']} {js(partial['content'])}"
    if kind == "tool_execution_end":
        result = event["result"]
        flag = "true" if event["isError"] else "false"
        line = f"tool_execution_end {event['toolCallId']} isError={flag} {js(result['content'])}"
        return line + (" terminate" if result.get("terminate") else "")
    if kind == "turn_end":
        ids = ",".join(r["toolCallId"] for r in event["toolResults"])
        return f"turn_end {message_line(event['message'])} toolResults=[{ids}]"
    if kind == "agent_end":
        return f"agent_end messages=[{','.join(m['role'] for m in event['messages'])}]"
    return str(kind)


class Recorder:
    """Collects the compact log and the normalised event objects of one scenario."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []

    def event(self, event: AgentEvent) -> None:
        data = event.dump()
        self.events.append(normalise(data))
        self.lines.append(event_line(data))

    async def listener(self, event: AgentEvent, signal: object) -> None:
        """An Agent subscriber that records."""
        self.event(event)

    def marker(self, name: str, data: Any = None) -> None:
        self.lines.append(f"<{name} {js({} if data is None else data)}>")

    def llm_call(self, number: int, model: object, context: Context, options: StreamOptions) -> None:
        """`on_call` hook of a ScriptedStream: the marker pi's recorder wrote for each model call."""
        line = f"<llm_call #{number} messages={js([render(m) for m in context.messages])}"
        if context.system_prompt:
            line += f" system={js(context.system_prompt)}"
        self.lines.append(line + ">")

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]
