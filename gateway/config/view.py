"""The configuration as clients see it: JSON-ready, every secret masked (`config.get`,
`gatewayctl config show`), and its fingerprint."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from gateway.config.gateway_config import GatewayConfig
from gateway.logging import redact


def redacted(config: GatewayConfig) -> dict[str, Any]:
    """The configuration as JSON-ready data with every secret masked (set secrets read `***`,
    unset ones stay null): for `config.get` and `gatewayctl config show`."""
    data = config.model_dump(mode="python")
    view: dict[str, Any] = _jsonable(redact(_unwrap_secrets(data)))
    return view


def config_hash(config: GatewayConfig) -> str:
    """A stable fingerprint of the configuration (of its redacted form, so secrets do not leak
    through it): `sha256:<hex>`."""
    canonical = json.dumps(redacted(config), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _unwrap_secrets(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "***"
    if isinstance(value, dict):
        return {key: _unwrap_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value
