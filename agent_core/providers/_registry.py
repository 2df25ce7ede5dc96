"""The registry of API providers, keyed by `Model.api`, and the dispatching entry points.

A provider may be registered by where its functions live (`register_api_provider_module`): its
module is imported the first time the API is asked for, so a process whose models never use an
API does not import its client code.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from importlib import import_module

import msgspec

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, Model, StreamFn, StreamOptions
from agent_core.messages import AssistantMessage
from agent_core.providers._common import error_message_of, error_stream, run_producer


class ApiProvider(msgspec.Struct, frozen=True):
    """How to stream from one API: `stream` takes provider-level options, `stream_simple` takes
    the common `StreamOptions` (with `reasoning`) and applies pi's simple defaults."""

    api: str
    stream: StreamFn
    stream_simple: StreamFn


_PROVIDERS: dict[str, ApiProvider] = {}
_ON_FIRST_USE: dict[str, tuple[str, str, str]] = {}
"""API -> (module, stream function's name, simple stream function's name), not imported yet."""


def register_api_provider(api: str, stream_fn: StreamFn, stream_simple_fn: StreamFn | None = None) -> None:
    """Register (or replace) the provider of `api`. `stream_simple_fn` defaults to `stream_fn`."""
    _ON_FIRST_USE.pop(api, None)
    _PROVIDERS[api] = ApiProvider(api, stream_fn, stream_simple_fn or stream_fn)


def register_api_provider_module(api: str, module: str, stream_name: str, stream_simple_name: str) -> None:
    """Register (or replace) the provider of `api` by the module and names of its functions; the
    module is imported when the API is first asked for (an import error then surfaces there)."""
    _PROVIDERS.pop(api, None)
    _ON_FIRST_USE[api] = (module, stream_name, stream_simple_name)


def unregister_api_provider(api: str) -> bool:
    """Remove the provider of `api`; False when none was registered."""
    lazy = _ON_FIRST_USE.pop(api, None) is not None
    return _PROVIDERS.pop(api, None) is not None or lazy


def get_api_provider(api: str) -> ApiProvider | None:
    provider = _PROVIDERS.get(api)
    if provider is None and api in _ON_FIRST_USE:
        module_name, stream_name, simple_name = _ON_FIRST_USE[api]
        module = import_module(module_name)
        register_api_provider(api, getattr(module, stream_name), getattr(module, simple_name))
        provider = _PROVIDERS[api]
    return provider


def list_api_providers() -> list[str]:
    return sorted({*_PROVIDERS, *_ON_FIRST_USE})


def stream(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream from the provider registered for `model.api`. Never raises: an unknown API or a
    provider that fails to start is an `error` event."""
    provider = _provider_or_error(model)
    if isinstance(provider, AssistantMessageEventStream):
        return provider
    return _call(provider.stream, model, context, options)


def stream_simple(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Like `stream`, through the provider's simple entry point (the one the agent loop uses)."""
    provider = _provider_or_error(model)
    if isinstance(provider, AssistantMessageEventStream):
        return provider
    return _call(provider.stream_simple, model, context, options)


async def complete(model: Model, context: Context, options: StreamOptions | None = None) -> AssistantMessage:
    """The final message of `stream` (an error is a message with stop_reason "error")."""
    return await stream(model, context, options).result()


async def complete_simple(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessage:
    """The final message of `stream_simple`."""
    return await stream_simple(model, context, options).result()


def _provider_or_error(model: Model) -> ApiProvider | AssistantMessageEventStream:
    """The provider of `model.api`, or an error stream: none registered, or its module failed to
    import."""
    try:
        provider = get_api_provider(model.api)
    except Exception as exc:
        return error_stream(model, f"API provider for {model.api} failed to load: {error_message_of(exc)}")
    if provider is None:
        return error_stream(model, f"No API provider registered for api: {model.api}")
    return provider


def _call(
    fn: StreamFn, model: Model, context: Context, options: StreamOptions | None
) -> AssistantMessageEventStream:
    try:
        result = fn(model, context, options if options is not None else StreamOptions())
    except Exception as exc:
        return error_stream(model, error_message_of(exc))
    if isinstance(result, AssistantMessageEventStream):
        return result
    if not inspect.isawaitable(result):
        return error_stream(model, f"Stream function for {model.api} returned {type(result).__name__}")
    return _pipe(model, result)


def _pipe(model: Model, pending: Awaitable[AssistantMessageEventStream]) -> AssistantMessageEventStream:
    """A stream that relays the stream an async stream function eventually returns. Closing the
    outer stream cancels the relay, which closes the inner one."""
    outer = AssistantMessageEventStream()

    async def relay() -> None:
        async with await pending as inner:
            async for event in inner:
                outer.push(event)
            if not outer.done:
                outer.end(await inner.result())

    return run_producer(outer, model, relay)
