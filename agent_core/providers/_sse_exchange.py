"""One streaming HTTP exchange of an SSE provider: resolve the key, build the body, send the
request, announce ``start`` once the response has arrived, feed the body's events to the
provider's assembler until it has what it needs, and end the stream with the reply or the error.
Every HTTP provider's stream module runs its requests through `produce_sse`; what differs
between them is the assembler and the request's URL, headers and body."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import aclosing
from typing import Any, Protocol

import msgspec

from agent_core.errors import ProviderError
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import ErrorEvent, StartEvent, completing_event
from agent_core.llm import Model, StreamOptions
from agent_core.messages import AssistantMessage
from agent_core.providers._common import fail_output, new_output, resolve_api_key, snapshot
from agent_core.providers._sse import ServerSentEvent, SSEDecoder


class SSEAssembler(Protocol):
    """Builds the reply from a provider's SSE events (sans I/O)."""

    @property
    def stream(self) -> AssistantMessageEventStream: ...

    @property
    def output(self) -> AssistantMessage: ...

    def feed_sse(self, sse: ServerSentEvent) -> None:
        """Apply one event; raise `ProviderError` for an error the stream reports."""
        ...

    def complete(self) -> bool:
        """Whether the reply is whole (the rest of the body, if any, is not read)."""
        ...

    def finish(self) -> str | None:
        """The body has ended: complete what is pending; what is wrong with the reply (it ended
        early), or None."""
        ...


class SSERequest(msgspec.Struct, frozen=True):
    """Where and how a provider sends one request (`headers` gets the API key and the body)."""

    base_url: str
    url: str
    headers: Callable[[str | None, dict[str, Any]], Mapping[str, str]]
    body: Callable[[], dict[str, Any]]
    format_error: Callable[[int, str], str]


async def produce_sse(
    model: Model,
    options: StreamOptions,
    stream: AssistantMessageEventStream,
    request: SSERequest,
    assembler: Callable[[AssistantMessage], SSEAssembler],
) -> None:
    """Run one request of `model` and end `stream` with its reply, or with the error (every
    failure, including a missing API key, an HTTP error and an abort, ends the stream; nothing
    is raised)."""
    # The HTTP plumbing (and httpx) is imported by the first request, not with the registry: a
    # process whose models never call the API does not load it.
    from agent_core.providers._http import AbortScope

    output = new_output(model)
    signal = options.signal
    try:
        api_key, problem = resolve_api_key(model, options, request.base_url)
        if problem is not None:
            raise ProviderError(problem)
        body = request_body(request.body(), model, options)
        assembly = assembler(output)
        async with AbortScope(signal):
            await exchange_sse(
                url=request.url,
                headers=request.headers(api_key, body),
                body=body,
                options=options,
                format_error=request.format_error,
                assembler=assembly,
            )
        problem = assembly.finish()
        if signal is not None and signal.aborted:
            raise ProviderError("Request was aborted")
        if problem is not None:
            raise ProviderError(problem)
        final = completing_event(output)
        if isinstance(final, ErrorEvent):
            raise ProviderError(output.error_message or "An unknown error occurred")
        stream.push(final)
        stream.end(output)
    except Exception as exc:
        fail_output(stream, output, exc, aborted=signal is not None and signal.aborted)


def request_body(body: dict[str, Any], model: Model, options: StreamOptions) -> dict[str, Any]:
    """`body`, or what the caller's `on_payload` hook returned in its place (a dict)."""
    if options.on_payload is not None:
        replaced: Any = options.on_payload(body, model)
        if isinstance(replaced, dict):
            return replaced
    return body


async def exchange_sse(
    *,
    url: str,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    options: StreamOptions,
    format_error: Callable[[int, str], str],
    assembler: SSEAssembler,
) -> None:
    """POST `body` and feed the response's events to `assembler`, returning early once
    `assembler.complete()` says nothing more is needed (a server may keep the body open after
    its last event). Raises what `HttpStream` and the assembler raise."""
    from agent_core.providers._http import HttpStream

    async with HttpStream(
        url=url, headers=headers, body=body, options=options, format_error=format_error
    ) as http:
        await http.open()
        assembler.stream.push(StartEvent(partial=snapshot(assembler.output)))
        decoder = SSEDecoder()
        async with aclosing(http.chunks()) as chunks:
            async for chunk in chunks:
                for event in decoder.feed(chunk):
                    assembler.feed_sse(event)
                if assembler.complete():
                    return
        for event in decoder.close():
            assembler.feed_sse(event)
