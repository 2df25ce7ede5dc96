"""API keys from the environment."""

from __future__ import annotations

import os
import re

_ENV_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "zai": ("ZAI_API_KEY",),
}


def env_var_names(provider: str) -> tuple[str, ...]:
    """The variables consulted for `provider`: the known ones, else ``<PROVIDER>_API_KEY``."""
    known = _ENV_KEYS.get(provider)
    if known is not None:
        return known
    return (re.sub(r"[^A-Z0-9]+", "_", provider.upper()).strip("_") + "_API_KEY",)


def get_env_api_key(provider: str) -> str | None:
    """The API key for `provider` from the environment (``OPENAI_API_KEY``, ...), or None.

    Providers without a known variable use ``<PROVIDER>_API_KEY`` (``ollama`` reads
    ``OLLAMA_API_KEY``). Empty values count as unset.
    """
    for name in env_var_names(provider):
        value = os.environ.get(name)
        if value:
            return value
    return None
