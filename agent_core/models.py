"""The model catalogue: real models with their limits and prices, plus user-defined ones.

A model is named ``provider/model-id`` (``openai/gpt-4o``, ``anthropic/claude-sonnet-4-5``,
``faux/echo``); the id may itself contain slashes (``openrouter/anthropic/claude-3.5-sonnet``).
Prices are dollars per million tokens (list prices, standard tier). User-defined models (an
Ollama or vLLM model, a private deployment) are added with `register_model` or from configuration
with `register_models_from_config` and replace built-in entries of the same name.

The catalogue is process-wide; it changes only through the functions of this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from agent_core.errors import ModelNotFoundError
from agent_core.llm import Model, ModelCost

_OPENAI_URL = "https://api.openai.com/v1"
_ANTHROPIC_URL = "https://api.anthropic.com"
_GOOGLE_URL = "https://generativelanguage.googleapis.com/v1beta"


def _openai(
    model_id: str,
    name: str,
    *,
    context: int,
    max_out: int,
    price: tuple[float, float, float],
    reasoning: bool = False,
) -> Model:
    return Model(
        id=model_id,
        name=name,
        api="openai-completions",
        provider="openai",
        base_url=_OPENAI_URL,
        reasoning=reasoning,
        input=["text", "image"],
        cost=ModelCost(input=price[0], output=price[1], cache_read=price[2], cache_write=0),
        context_window=context,
        max_tokens=max_out,
    )


def _anthropic(
    model_id: str,
    name: str,
    *,
    max_out: int,
    price: tuple[float, float, float, float],
    reasoning: bool = True,
) -> Model:
    return Model(
        id=model_id,
        name=name,
        api="anthropic-messages",
        provider="anthropic",
        base_url=_ANTHROPIC_URL,
        reasoning=reasoning,
        input=["text", "image"],
        cost=ModelCost(input=price[0], output=price[1], cache_read=price[2], cache_write=price[3]),
        context_window=200_000,
        max_tokens=max_out,
    )


def _google(
    model_id: str, name: str, *, max_out: int, price: tuple[float, float, float], reasoning: bool = True
) -> Model:
    return Model(
        id=model_id,
        name=name,
        api="google-generative-ai",
        provider="google",
        base_url=_GOOGLE_URL,
        reasoning=reasoning,
        input=["text", "image"],
        cost=ModelCost(input=price[0], output=price[1], cache_read=price[2], cache_write=0),
        context_window=1_048_576,
        max_tokens=max_out,
    )


def _builtin_models() -> list[Model]:
    return [
        _openai("gpt-4o", "GPT-4o", context=128_000, max_out=16_384, price=(2.5, 10, 1.25)),
        _openai("gpt-4o-mini", "GPT-4o mini", context=128_000, max_out=16_384, price=(0.15, 0.6, 0.075)),
        _openai("gpt-4.1", "GPT-4.1", context=1_047_576, max_out=32_768, price=(2, 8, 0.5)),
        _openai("gpt-4.1-mini", "GPT-4.1 mini", context=1_047_576, max_out=32_768, price=(0.4, 1.6, 0.1)),
        _openai("o3", "o3", context=200_000, max_out=100_000, price=(2, 8, 0.5), reasoning=True),
        _openai(
            "o4-mini", "o4-mini", context=200_000, max_out=100_000, price=(1.1, 4.4, 0.275), reasoning=True
        ),
        _openai("gpt-5", "GPT-5", context=400_000, max_out=128_000, price=(1.25, 10, 0.125), reasoning=True),
        _openai(
            "gpt-5-mini",
            "GPT-5 mini",
            context=400_000,
            max_out=128_000,
            price=(0.25, 2, 0.025),
            reasoning=True,
        ),
        _anthropic("claude-opus-4-1", "Claude Opus 4.1", max_out=32_000, price=(15, 75, 1.5, 18.75)),
        _anthropic("claude-sonnet-4-5", "Claude Sonnet 4.5", max_out=64_000, price=(3, 15, 0.3, 3.75)),
        _anthropic("claude-haiku-4-5", "Claude Haiku 4.5", max_out=64_000, price=(1, 5, 0.1, 1.25)),
        _anthropic(
            "claude-3-5-haiku-latest",
            "Claude Haiku 3.5",
            max_out=8_192,
            price=(0.8, 4, 0.08, 1),
            reasoning=False,
        ),
        _google("gemini-2.5-pro", "Gemini 2.5 Pro", max_out=65_536, price=(1.25, 10, 0.31)),
        _google("gemini-2.5-flash", "Gemini 2.5 Flash", max_out=65_536, price=(0.3, 2.5, 0.075)),
        _google(
            "gemini-2.0-flash", "Gemini 2.0 Flash", max_out=8_192, price=(0.1, 0.4, 0.025), reasoning=False
        ),
        Model(
            id="echo",
            name="Faux echo",
            api="faux",
            provider="faux",
            base_url="http://localhost:0",
            input=["text", "image"],
            context_window=128_000,
            max_tokens=16_384,
        ),
    ]


# Other names the API itself accepts for a catalogue model.
_ALIASES: dict[tuple[str, str], str] = {
    ("anthropic", "claude-3-5-haiku"): "claude-3-5-haiku-latest",
    ("anthropic", "claude-3-5-haiku-20241022"): "claude-3-5-haiku-latest",
    ("anthropic", "claude-opus-4-1-20250805"): "claude-opus-4-1",
    ("anthropic", "claude-sonnet-4-5-20250929"): "claude-sonnet-4-5",
    ("anthropic", "claude-haiku-4-5-20251001"): "claude-haiku-4-5",
}

_BUILTIN: dict[tuple[str, str], Model] = {(m.provider, m.id): m for m in _builtin_models()}
_CATALOGUE: dict[tuple[str, str], Model] = dict(_BUILTIN)


def _key(provider: str, model_id: str) -> tuple[str, str]:
    key = (provider, model_id)
    return (provider, _ALIASES[key]) if key in _ALIASES and key not in _CATALOGUE else key


def list_models(provider: str | None = None) -> list[Model]:
    """Every known model (of `provider` when given), sorted by reference."""
    models = [m for m in _CATALOGUE.values() if provider is None or m.provider == provider]
    return sorted(models, key=lambda m: m.ref)


def list_providers() -> list[str]:
    return sorted({provider for provider, _ in _CATALOGUE})


def find_model(provider: str, model_id: str) -> Model | None:
    """The model, or None when it is not in the catalogue."""
    return _CATALOGUE.get(_key(provider, model_id))


def get_model(provider: str, model_id: str) -> Model:
    """The model `provider`/`model_id`. Raises `ModelNotFoundError` naming the known models."""
    model = find_model(provider, model_id)
    if model is None:
        raise ModelNotFoundError(_not_found(f"{provider}/{model_id}"))
    return model


def _not_found(ref: str) -> str:
    known = ", ".join(m.ref for m in list_models())
    return f"Unknown model {ref!r}. Known models: {known}"


def parse_ref(ref: str) -> tuple[str, str]:
    """Split ``provider/model-id`` at the first slash. Raises `ModelNotFoundError` when malformed."""
    provider, slash, model_id = ref.strip().partition("/")
    if not slash or not provider or not model_id:
        raise ModelNotFoundError(f"Model reference {ref!r} is not of the form provider/model-id")
    return provider, model_id


def resolve_model(ref: str, *, allow_unknown: bool = False) -> Model:
    """The model named ``provider/model-id``.

    With `allow_unknown`, an id the catalogue does not list is accepted under a provider that
    already has an ``openai-completions`` model with a base URL (a local server, OpenRouter, ...):
    the result uses that provider's base URL, headers and compat with default limits and zero
    prices. Raises `ModelNotFoundError` (listing the known models) otherwise.
    """
    provider, model_id = parse_ref(ref)
    model = find_model(provider, model_id)
    if model is not None:
        return model
    if allow_unknown:
        template = next(
            (
                m
                for m in list_models(provider)
                if m.api == "openai-completions" and m.base_url and m.provider != "faux"
            ),
            None,
        )
        if template is not None:
            return Model(
                id=model_id,
                name=model_id,
                api=template.api,
                provider=provider,
                base_url=template.base_url,
                headers=template.headers,
                compat=template.compat,
            )
    raise ModelNotFoundError(_not_found(ref))


def register_model(model: Model) -> Model:
    """Add `model` to the catalogue, replacing any model of the same provider and id."""
    _CATALOGUE[(model.provider, model.id)] = model
    return model


def unregister_model(provider: str, model_id: str) -> bool:
    """Remove a model; a built-in one comes back to its catalogue definition. False if unknown."""
    key = (provider, model_id)
    if key not in _CATALOGUE:
        return False
    if key in _BUILTIN:
        _CATALOGUE[key] = _BUILTIN[key]
    else:
        del _CATALOGUE[key]
    return True


def reset_models() -> None:
    """Forget every user-defined model (back to the built-in catalogue)."""
    _CATALOGUE.clear()
    _CATALOGUE.update(_BUILTIN)


def model_from_config(entry: Mapping[str, Any]) -> Model:
    """A `Model` from a configuration entry (camelCase or snake_case keys).

    Required: ``provider`` and ``id``; a ``None`` value counts as unset. Defaults: ``api``
    "openai-completions", ``name`` = id,
    zero prices, the `Model` defaults for limits. A ``ref`` key (``provider/id``) may replace the
    two. Raises `ValueError` with the field at fault (unknown keys too: a typo must not pass).
    """
    data = {key: value for key, value in entry.items() if value is not None}
    ref = data.pop("ref", None)
    if isinstance(ref, str):
        provider, model_id = parse_ref(ref)
        data.setdefault("provider", provider)
        data.setdefault("id", model_id)
    known = {"ref", *Model.model_fields}
    known.update(f.alias for f in Model.model_fields.values() if f.alias)
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ValueError(f"unknown key(s): {', '.join(unknown)}")
    data.setdefault("api", "openai-completions")
    if "id" in data:
        data.setdefault("name", data["id"])
    try:
        return Model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'model'}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(problems) from None


def register_models_from_config(entries: Iterable[Mapping[str, Any]]) -> list[Model]:
    """Register every model of a configuration list; all or nothing.

    Raises `ValueError` naming the entry (by position and reference) that is invalid; nothing is
    registered then.
    """
    models: list[Model] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"models[{position}]: expected a table, got {type(entry).__name__}")
        try:
            models.append(model_from_config(entry))
        except (ValueError, ModelNotFoundError) as exc:
            label = entry.get("ref") or f"{entry.get('provider', '?')}/{entry.get('id', '?')}"
            raise ValueError(f"models[{position}] ({label}): {exc}") from None
    for model in models:
        register_model(model)
    return models
