"""The model catalogue and user-defined models."""

from __future__ import annotations

import pytest

from agent_core.errors import ModelNotFoundError
from agent_core.llm import Context, StreamOptions
from agent_core.messages import Usage, UserMessage
from agent_core.models import (
    find_model,
    get_model,
    list_models,
    list_providers,
    register_model,
    register_models_from_config,
    resolve_model,
    unregister_model,
)
from agent_core.providers import stream_simple
from agent_core.usage import calculate_cost
from tests.agent_core.providers.llm_server import LLMServer, sse

REQUIRED = [
    "openai/gpt-4o",
    "openai/gpt-4o-mini",
    "openai/gpt-4.1",
    "openai/gpt-4.1-mini",
    "openai/o3",
    "openai/o4-mini",
    "openai/gpt-5",
    "openai/gpt-5-mini",
    "anthropic/claude-opus-4-1",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "anthropic/claude-3-5-haiku",
    "faux/echo",
]


@pytest.mark.parametrize("ref", REQUIRED)
def test_catalogue_models_are_complete(ref: str) -> None:
    model = resolve_model(ref)
    assert model.context_window > 0 and model.max_tokens > 0
    assert model.input and model.name
    if model.provider != "faux":
        assert model.cost.input > 0 and model.cost.output > model.cost.input
        assert model.base_url.startswith("https://")


def test_known_prices_and_limits() -> None:
    sonnet = get_model("anthropic", "claude-sonnet-4-5")
    assert (sonnet.cost.input, sonnet.cost.output, sonnet.cost.cache_read, sonnet.cost.cache_write) == (
        3,
        15,
        0.3,
        3.75,
    )
    assert sonnet.reasoning and sonnet.api == "anthropic-messages"
    gpt = get_model("openai", "gpt-4o")
    assert (gpt.cost.input, gpt.cost.output, gpt.context_window) == (2.5, 10, 128_000)
    assert not gpt.reasoning and get_model("openai", "o3").reasoning
    assert resolve_model("anthropic/claude-3-5-haiku").id == "claude-3-5-haiku-latest"


def test_cost_is_price_per_million_times_tokens() -> None:
    usage = Usage(input=1000, output=2000, cache_read=3000, cache_write=4000)
    cost = calculate_cost(get_model("anthropic", "claude-sonnet-4-5"), usage)
    assert (cost.input, cost.output, cost.cache_read, cost.cache_write) == pytest.approx(
        (0.003, 0.03, 0.0009, 0.015)
    )
    assert cost.total == cost.input + cost.output + cost.cache_read + cost.cache_write


def test_unknown_models_name_the_known_ones() -> None:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("openai/gpt-99")
    assert "openai/gpt-99" in str(info.value) and "openai/gpt-4o" in str(info.value)
    with pytest.raises(ModelNotFoundError, match="provider/model-id"):
        resolve_model("gpt-4o")
    with pytest.raises(ModelNotFoundError):
        get_model("nobody", "x")
    assert find_model("nobody", "x") is None


@pytest.mark.usefixtures("clean_catalogue")
def test_config_defined_ollama_model_and_unknown_ids_under_it() -> None:
    (model,) = register_models_from_config(
        [
            {
                "provider": "ollama",
                "id": "llama3.1:8b",
                "baseUrl": "http://127.0.0.1:11434/v1",
                "contextWindow": 131072,
                "maxTokens": 8192,
                "compat": {"supportsStore": False},
            }
        ]
    )
    assert resolve_model("ollama/llama3.1:8b") == model
    assert (model.api, model.name, model.cost.input, model.context_window) == (
        "openai-completions",
        "llama3.1:8b",
        0,
        131072,
    )
    assert "ollama" in list_providers()
    with pytest.raises(ModelNotFoundError):
        resolve_model("ollama/qwen3:4b")
    guessed = resolve_model("ollama/qwen3:4b", allow_unknown=True)
    assert (guessed.id, guessed.base_url, guessed.compat) == (
        "qwen3:4b",
        "http://127.0.0.1:11434/v1",
        {"supportsStore": False},
    )
    with pytest.raises(ModelNotFoundError):
        resolve_model("anthropic/claude-9", allow_unknown=True)  # not an openai-compatible provider


@pytest.mark.usefixtures("clean_catalogue")
def test_config_entries_with_unset_fields_and_snake_case_keys() -> None:
    (model,) = register_models_from_config(
        [
            {
                "id": "m",
                "provider": "vllm",
                "api": "openai-completions",
                "name": None,
                "base_url": None,
                "max_tokens": 99,
            }
        ]
    )
    assert (model.name, model.base_url, model.max_tokens) == ("m", "", 99)


@pytest.mark.usefixtures("clean_catalogue")
def test_model_ids_may_contain_slashes() -> None:
    register_model(
        get_model("openai", "gpt-4o").model_copy(update={"provider": "openrouter", "id": "openai/gpt-4o"})
    )
    assert resolve_model("openrouter/openai/gpt-4o").id == "openai/gpt-4o"


@pytest.mark.usefixtures("clean_catalogue")
def test_invalid_config_names_the_entry_and_registers_nothing() -> None:
    good = {"ref": "vllm/qwen", "baseUrl": "http://127.0.0.1:8000/v1"}
    with pytest.raises(ValueError, match=r"models\[1\] \(local/x\): contextWindow"):
        register_models_from_config([good, {"provider": "local", "id": "x", "contextWindow": "big"}])
    with pytest.raises(ValueError, match="unknown key"):
        register_models_from_config([{"provider": "local", "id": "x", "baseURL": "http://h"}])
    assert find_model("vllm", "qwen") is None


@pytest.mark.usefixtures("clean_catalogue")
def test_user_models_override_and_unregister_restores() -> None:
    custom = get_model("openai", "gpt-4o").model_copy(update={"base_url": "http://127.0.0.1:9/v1"})
    register_model(custom)
    assert get_model("openai", "gpt-4o").base_url == "http://127.0.0.1:9/v1"
    assert unregister_model("openai", "gpt-4o")
    assert get_model("openai", "gpt-4o").base_url == "https://api.openai.com/v1"
    assert not unregister_model("openai", "nope")
    assert len(list_models("anthropic")) == 4


@pytest.mark.usefixtures("clean_catalogue")
async def test_a_config_model_streams_from_its_server(llm_server: LLMServer) -> None:
    register_models_from_config([{"ref": "local/tiny", "baseUrl": f"{llm_server.base_url}/v1"}])
    llm_server.script(
        sse('data: {"choices":[{"index":0,"delta":{"content":"hey"},"finish_reason":"stop"}]}\n\n')
    )
    reply = await stream_simple(
        resolve_model("local/tiny"), Context(messages=[UserMessage(content="hi")]), StreamOptions()
    ).result()
    assert reply.stop_reason == "stop" and reply.content[0].text == "hey"  # type: ignore[union-attr]
    assert llm_server.requests[0].json["model"] == "tiny"
