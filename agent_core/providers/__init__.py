"""LLM providers: a registry keyed by `Model.api` and the built-in APIs.

Built in: ``openai-completions`` (OpenAI and every OpenAI-compatible server: Ollama, vLLM,
llama.cpp, OpenRouter, Groq, ...), ``openai-responses`` (OpenAI's Responses API),
``anthropic-messages``, ``google-generative-ai`` (Gemini), and ``faux`` (the ``faux/echo`` model;
scripted faux APIs come from `register_faux_provider`). Every stream function returns an
`AssistantMessageEventStream` and never raises: a failure is the stream's final `error` event,
whose message has stop_reason ``"error"`` or ``"aborted"`` and an error_message. Stream
functions must be called from a running event loop. A returned stream owns the task that produces
it: closing the stream (`aclose()`, leaving ``async with``) or abandoning its iteration stops that
task, which closes the HTTP response, and the stream ends with an ``"aborted"`` error.

The HTTP APIs' modules are imported when a model of theirs is first streamed from, or when one of
their names is first asked for here: a process that only uses faux never loads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.lazy_exports import exports_on_first_use
from agent_core.providers._common import RequestOutcome, is_loopback_url, observe_requests
from agent_core.providers._env import get_env_api_key
from agent_core.providers._registry import (
    ApiProvider,
    complete,
    complete_simple,
    get_api_provider,
    list_api_providers,
    register_api_provider,
    register_api_provider_module,
    stream,
    stream_simple,
    unregister_api_provider,
)
from agent_core.providers.faux import (
    FauxProvider,
    FauxState,
    FauxStep,
    TokenSize,
    faux_assistant_message,
    faux_text,
    faux_thinking,
    faux_tool_call,
    register_faux_provider,
)
from agent_core.providers.faux_echo import stream_faux

if TYPE_CHECKING:
    from agent_core.providers.anthropic import AnthropicOptions, stream_anthropic, stream_simple_anthropic
    from agent_core.providers.google import GoogleOptions, stream_google, stream_simple_google
    from agent_core.providers.openai_completions import (
        OpenAICompletionsOptions,
        stream_openai_completions,
        stream_simple_openai_completions,
    )
    from agent_core.providers.openai_responses import (
        OpenAIResponsesOptions,
        stream_openai_responses,
        stream_simple_openai_responses,
    )

_BUILTIN_HTTP_APIS: dict[str, tuple[str, str, str, str]] = {
    # API: its module, its stream function, its simple stream function, its options type.
    "openai-completions": (
        "agent_core.providers.openai_completions",
        "stream_openai_completions",
        "stream_simple_openai_completions",
        "OpenAICompletionsOptions",
    ),
    "openai-responses": (
        "agent_core.providers.openai_responses",
        "stream_openai_responses",
        "stream_simple_openai_responses",
        "OpenAIResponsesOptions",
    ),
    "anthropic-messages": (
        "agent_core.providers.anthropic",
        "stream_anthropic",
        "stream_simple_anthropic",
        "AnthropicOptions",
    ),
    "google-generative-ai": (
        "agent_core.providers.google",
        "stream_google",
        "stream_simple_google",
        "GoogleOptions",
    ),
}
_ON_FIRST_USE = {name: module for module, *names in _BUILTIN_HTTP_APIS.values() for name in names}
"""Names this package exports from the modules it does not import up front."""

__getattr__ = exports_on_first_use(__name__, globals(), _ON_FIRST_USE)


def register_builtin_providers() -> None:
    """(Re-)register the built-in APIs; done once at import. The HTTP APIs are registered by
    module (`register_api_provider_module`), imported when first used."""
    for api, (module, stream_name, simple_name, _options) in _BUILTIN_HTTP_APIS.items():
        register_api_provider_module(api, module, stream_name, simple_name)
    register_api_provider("faux", stream_faux, stream_faux)


register_builtin_providers()

__all__ = [
    "stream_simple_openai_responses",
    "stream_simple_google",
    "stream_openai_responses",
    "stream_google",
    "OpenAIResponsesOptions",
    "GoogleOptions",
    "AnthropicOptions",
    "ApiProvider",
    "FauxProvider",
    "FauxState",
    "FauxStep",
    "OpenAICompletionsOptions",
    "RequestOutcome",
    "TokenSize",
    "complete",
    "complete_simple",
    "faux_assistant_message",
    "faux_text",
    "faux_thinking",
    "faux_tool_call",
    "get_api_provider",
    "get_env_api_key",
    "is_loopback_url",
    "list_api_providers",
    "observe_requests",
    "register_api_provider",
    "register_api_provider_module",
    "register_builtin_providers",
    "register_faux_provider",
    "stream",
    "stream_anthropic",
    "stream_faux",
    "stream_openai_completions",
    "stream_simple",
    "stream_simple_anthropic",
    "stream_simple_openai_completions",
    "unregister_api_provider",
]
