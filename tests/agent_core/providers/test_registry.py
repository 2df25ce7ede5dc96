"""The provider registry and its guarantees: dispatch on api, never raise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import DoneEvent, StartEvent
from agent_core.llm import Context, Model, StreamOptions
from agent_core.messages import AssistantMessage, TextContent
from agent_core.providers import (
    complete_simple,
    get_api_provider,
    get_env_api_key,
    list_api_providers,
    register_api_provider,
    register_api_provider_module,
    stream,
    stream_simple,
    unregister_api_provider,
)
from tests.agent_core.providers.helpers import collect, compact

MODEL = Model(id="m", api="test-api", provider="test")


@pytest.fixture
def cleanup() -> object:
    yield None
    unregister_api_provider("test-api")


def test_builtins_are_registered() -> None:
    assert {"openai-completions", "anthropic-messages", "faux"} <= set(list_api_providers())


def test_builtin_http_apis_are_imported_when_first_asked_for() -> None:
    """In a fresh interpreter: importing the providers loads no HTTP API's module; asking for one
    loads that one only, and its functions are the module's own."""
    code = """
import json, sys
import agent_core.providers as providers
apis = ("anthropic", "google", "openai_completions", "openai_responses")
loaded = lambda: sorted(m for m in sys.modules if m.split(".")[-1] in apis)
before = loaded()
provider = providers.get_api_provider("anthropic-messages")
from agent_core.providers.anthropic import stream_anthropic, stream_simple_anthropic
print(json.dumps({
    "before": before,
    "after": loaded(),
    "same": provider.stream is stream_anthropic and provider.stream_simple is stream_simple_anthropic,
    "names": providers.AnthropicOptions.__name__,
}))
"""
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(done.stdout) == {
        "before": [],
        "after": ["agent_core.providers.anthropic"],
        "same": True,
        "names": "AnthropicOptions",
    }


async def test_a_provider_module_that_fails_to_import_is_an_error_event(cleanup: object) -> None:
    register_api_provider_module("test-api", "agent_core.providers.no_such_module", "stream", "stream")
    assert "test-api" in list_api_providers()
    events, final = await collect(stream_simple(MODEL, Context()))
    assert compact(events) == ["error reason=error"]
    assert final.error_message is not None
    assert final.error_message.startswith("API provider for test-api failed to load: ")
    assert unregister_api_provider("test-api") and "test-api" not in list_api_providers()


async def test_unknown_api_is_an_error_event() -> None:
    events, final = await collect(stream_simple(MODEL, Context()))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "No API provider registered for api: test-api"


@pytest.mark.usefixtures("cleanup")
async def test_dispatch_to_plain_and_simple_functions() -> None:
    calls: list[str] = []

    def make(label: str):  # type: ignore[no-untyped-def]
        def fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
            calls.append(label)
            out = AssistantMessageEventStream()
            message = AssistantMessage(
                content=[TextContent(text=label)], api=model.api, provider=model.provider, model=model.id
            )
            out.push(StartEvent(partial=message))
            out.push(DoneEvent(reason="stop", message=message))
            return out

        return fn

    register_api_provider("test-api", make("plain"), make("simple"))
    assert get_api_provider("test-api") is not None
    assert (await stream(MODEL, Context()).result()).content == [TextContent(text="plain")]
    assert (await complete_simple(MODEL, Context())).content == [TextContent(text="simple")]
    assert calls == ["plain", "simple"]


@pytest.mark.usefixtures("cleanup")
async def test_a_stream_function_that_raises_becomes_an_error_event() -> None:
    def broken(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        raise RuntimeError("no network today")

    register_api_provider("test-api", broken)
    final = await stream_simple(MODEL, Context()).result()
    assert (final.stop_reason, final.error_message) == ("error", "no network today")


@pytest.mark.usefixtures("cleanup")
async def test_async_stream_functions_are_relayed() -> None:
    async def later(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        out = AssistantMessageEventStream()
        message = AssistantMessage(api=model.api, provider=model.provider, model=model.id)
        out.push(DoneEvent(reason="stop", message=message))
        return out

    async def failing(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        raise ValueError("bad config")

    register_api_provider("test-api", later)  # type: ignore[arg-type]
    events, final = await collect(stream(MODEL, Context()))
    assert compact(events) == ["done reason=stop"] and final.stop_reason == "stop"
    register_api_provider("test-api", failing)  # type: ignore[arg-type]
    final = await stream(MODEL, Context()).result()
    assert final.error_message == "bad config"


def test_env_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    monkeypatch.setenv("GROQ_API_KEY", "g")
    monkeypatch.setenv("MY_LLAMA_API_KEY", "l")
    monkeypatch.setenv("EMPTY_API_KEY", "")
    assert [get_env_api_key(p) for p in ("openai", "anthropic", "groq", "my-llama", "empty", "unset")] == [
        "o",
        "a",
        "g",
        "l",
        None,
        None,
    ]
