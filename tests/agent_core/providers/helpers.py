"""Shared helpers of the provider tests: trace data, models, event collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    TextEndEvent,
    ThinkingEndEvent,
    ToolCallEndEvent,
)
from agent_core.llm import Context, Model, ModelCost, StreamOptions, Tool
from agent_core.messages import AssistantMessage, UserMessage
from agent_core.providers import stream_simple
from tests.agent_core.providers.llm_server import LLMServer, sse

DATA = Path(__file__).parent / "data"
TRACE_PRICES = ModelCost(input=3, output=15, cache_read=0.3, cache_write=3.75)
SCRATCH_KEYS = {"index", "partialJson", "partialArgs", "streamIndex"}


def load_trace(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


def echo_tool() -> Tool:
    return Tool(
        name="echo",
        description="Echo",
        parameters={"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]},
    )


def trace_context() -> Context:
    """The context every provider trace was recorded with."""
    return Context(system_prompt="sys", messages=[UserMessage(content="hi")], tools=[echo_tool()])


def openai_model(base_url: str, **overrides: Any) -> Model:
    fields: dict[str, Any] = {
        "id": "gpt-test",
        "api": "openai-completions",
        "provider": "openai",
        "base_url": f"{base_url}/v1",
        "cost": TRACE_PRICES,
        "max_tokens": 4096,
    }
    fields.update(overrides)
    return Model(**fields)


def anthropic_model(base_url: str, **overrides: Any) -> Model:
    fields: dict[str, Any] = {
        "id": "claude-test",
        "api": "anthropic-messages",
        "provider": "anthropic",
        "base_url": base_url,
        "reasoning": True,
        "cost": TRACE_PRICES,
        "max_tokens": 8192,
    }
    fields.update(overrides)
    return Model(**fields)


def responses_model(base_url: str, **overrides: Any) -> Model:
    return openai_model(base_url, api="openai-responses", **overrides)


def google_model(base_url: str, **overrides: Any) -> Model:
    fields: dict[str, Any] = {
        "id": "gemini-test",
        "api": "google-generative-ai",
        "provider": "google",
        "base_url": f"{base_url}/v1beta",
        "reasoning": True,
        "cost": TRACE_PRICES,
        "max_tokens": 8192,
    }
    fields.update(overrides)
    return Model(**fields)


def wire_data(name: str) -> bytes:
    """A recorded body (``data/<name>``), byte for byte as the API sent it."""
    return (DATA / name).read_bytes()


async def collect(
    stream: AssistantMessageEventStream,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    events = [event async for event in stream]
    return events, await stream.result()


KEY = StreamOptions(api_key="test-key")


async def run_scripted(
    server: LLMServer, model: Model, *pieces: str, options: StreamOptions = KEY
) -> tuple[list[str], Any]:
    """Script `pieces` as the server's SSE reply, stream `model` over the trace context, and
    return the events in compact notation with the final message."""
    server.script(sse(*pieces))
    events, final = await collect(stream_simple(model, trace_context(), options))
    return compact(events), final


def _js(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def compact(events: list[AssistantMessageEvent]) -> list[str]:
    """Events in the traces' compact notation."""
    lines = []
    for event in events:
        data = event.dump()
        line = event.type
        if "contentIndex" in data:
            line += f" ci={data['contentIndex']}"
        if "delta" in data:
            line += f" delta={_js(data['delta'])}"
        if isinstance(event, TextEndEvent | ThinkingEndEvent):
            line += f" content={_js(event.content)}"
        if isinstance(event, ToolCallEndEvent):
            line += f" toolCall={_js(event.tool_call.dump())}"
        if isinstance(event, DoneEvent | ErrorEvent):
            line += f" reason={event.reason}"
        lines.append(line)
    return lines


def without_timestamp(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "timestamp": "<ts>"}


def strip_scratch(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in block.items() if k not in SCRATCH_KEYS} for block in content]


def event_view(event: AssistantMessageEvent) -> dict[str, Any]:
    """An event in the traces' `events` notation (partial reduced to its content)."""
    data = event.dump()
    view: dict[str, Any] = {"type": data["type"]}
    for key in ("contentIndex", "delta", "content", "toolCall", "reason"):
        if key in data:
            view[key] = data[key]
    if "partial" in data:
        view["partialContent"] = data["partial"]["content"]
    if "message" in data:
        view["message"] = without_timestamp(data["message"])
    if "error" in data:
        view["error"] = without_timestamp(data["error"])
    return view


def trace_event_view(event: dict[str, Any]) -> dict[str, Any]:
    view = dict(event)
    if "partialContent" in view:
        view["partialContent"] = strip_scratch(view["partialContent"])
    return view
