"""`load_config`: the configuration from its three layers, with errors that name key and source.

1. Defaults: the field defaults of the models (`gateway.config.sections`, `gateway.config.agents`)
   are the single source of truth; the installed package needs no data file.
   `config/gateway.toml` in the repository writes the same values out with comments, as
   documentation and a starting point, and a test keeps the two identical.
2. The user file: `load_config(path)`, else the path in `GATEWAY_CONFIG`. Relative paths inside
   it are relative to the file; `~` is the user's home.
3. Environment variables (`ENV_OVERRIDES`, plus each provider's `api_key_env`). Command-line
   flags reach this layer as the variables they stand for (`gatewayd` folds them into the
   environment it passes).

Errors never surface as tracebacks: `load_config` raises `ConfigError` whose message names the
source (file or environment variable) and the key path, e.g.
``config error in /etc/gateway.toml: runs.max_concurrent: Input should be greater than 0``.
Unknown keys are errors too, except inside `[bindings]`, which the binding adapters validate.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from pydantic import ValidationError

from gateway.config.gateway_config import GatewayConfig
from gateway.config.paths import default_home, expand_path
from gateway.config.sections import default_providers
from gateway.errors import ConfigError, ConfigProblem

DEFAULTS_SOURCE = "built-in defaults"
"""The source errors name for a value no file or variable set."""

ENV_OVERRIDES: Mapping[str, tuple[str, ...]] = {
    "GATEWAY_HOST": ("gateway", "host"),
    "GATEWAY_PORT": ("gateway", "port"),
    "GATEWAY_TOKEN": ("gateway", "token"),
    "GATEWAY_PASSWORD": ("gateway", "password"),
    "GATEWAY_HOME": ("gateway", "home"),
    "GATEWAY_MODEL": ("agent_defaults", "model"),
    "GATEWAY_LOG_LEVEL": ("logging", "level"),
    "GATEWAY_DATABASE_URL": ("database", "url"),
    "GATEWAY_REDIS_URL": ("cluster", "redis_url"),
    "GATEWAY_NODE_ID": ("cluster", "node_id"),
    "OPENAI_BASE_URL": ("providers", "openai", "base_url"),
    "ANTHROPIC_BASE_URL": ("providers", "anthropic", "base_url"),
}
"""Environment variable -> key path it overrides. API keys come from each provider's
`api_key_env` (by default `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`)."""

_FILE_PATH_KEYS = (("gateway", "home"),)
_FILE_PATH_LIST_KEYS = (("skills", "dirs"), ("prompts", "dirs"))
_AGENT_PATH_KEYS = ("workspace", "system_prompt_file")

Loc = tuple[str | int, ...]


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build the configuration: defaults, then the user file (`path`, else `GATEWAY_CONFIG`, else
    none), then environment variables. `env` defaults to `os.environ`.

    Raises ConfigError (one line per problem, naming the source and the key) for an unreadable
    or invalid file, an unknown key, an invalid value, or an explicitly configured system prompt
    file that does not exist.
    """
    env = os.environ if env is None else env
    if path is None and env.get("GATEWAY_CONFIG"):
        path = expand_path(env["GATEWAY_CONFIG"], env)
    source = path.absolute() if path is not None else None

    raw: dict[str, Any] = {}
    origins: dict[Loc, str] = {}
    if source is not None:
        _merge(raw, _read_file(source, env), str(source), origins)
        # The file on its own first: a value that an environment variable or a command-line
        # flag replaces below must still be reported when it is wrong.
        try:
            GatewayConfig.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(_problems(exc, origins, str(source))) from None
    _merge(raw, _env_layer(raw, env), "environment", origins)

    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, origins, str(source) if source else DEFAULTS_SOURCE)) from None

    home = config.gateway.home or default_home(env)
    config = config.model_copy(update={"gateway": config.gateway.model_copy(update={"home": home})})
    config._source = source
    _check_files(config, origins)
    return config


def _read_file(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(str(path), "", message)])

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail("file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read file: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(f"invalid TOML: {exc}") from None
    _absolutize(data, path.parent, env)
    return data


def _absolutize(data: dict[str, Any], base: Path, env: Mapping[str, str]) -> None:
    """Paths written in a file are relative to that file."""

    def fix(value: Any) -> Any:
        if isinstance(value, str) and value:
            expanded = expand_path(value, env)
            return str(expanded if expanded.is_absolute() else base / expanded)
        return value

    for section, key in _FILE_PATH_KEYS:
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            table[key] = fix(table[key])
    for section, key in _FILE_PATH_LIST_KEYS:
        table = data.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), list):
            table[key] = [fix(value) for value in table[key]]
    agents = data.get("agents")
    tables = [data]
    if isinstance(agents, list):
        for agent in agents:
            if isinstance(agent, dict):
                tables.append(agent)
                for key in _AGENT_PATH_KEYS:
                    if key in agent:
                        agent[key] = fix(agent[key])
    for table in tables:
        servers = table.get("mcp_servers")
        for server in servers if isinstance(servers, list) else ():
            paths = server.get("read_only") if isinstance(server, dict) else None
            if isinstance(paths, list):
                server["read_only"] = [fix(path) for path in paths]


def _env_layer(merged: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The environment as a nested dict whose leaves remember their variable name."""
    layer: dict[str, Any] = {}

    def put(path: tuple[str, ...], name: str, value: str) -> None:
        node = layer
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = _EnvValue(name, value)

    for name, path in ENV_OVERRIDES.items():
        value = env.get(name)
        if value:
            if name == "GATEWAY_HOME":
                value = str(expand_path(value, env).absolute())
            put(path, name, value)

    providers = dict(default_providers())
    file_providers = merged.get("providers")
    names = set(providers) | (set(file_providers) if isinstance(file_providers, dict) else set())
    for provider in sorted(names):
        key_env = providers[provider].api_key_env if provider in providers else None
        if isinstance(file_providers, dict) and isinstance(file_providers.get(provider), dict):
            key_env = file_providers[provider].get("api_key_env", key_env)
        if isinstance(key_env, str) and env.get(key_env):
            put(("providers", provider, "api_key"), key_env, env[key_env])
    return layer


class _EnvValue(msgspec.Struct, frozen=True):
    name: str
    value: str


def _merge(
    base: dict[str, Any],
    overlay: Mapping[str, Any],
    source: str,
    origins: dict[Loc, str],
    path: Loc = (),
) -> None:
    """Merge `overlay` into `base` (tables merge, everything else replaces) and record where each
    value came from."""
    for key, value in overlay.items():
        here = (*path, key)
        if isinstance(value, Mapping):
            node = base.get(key)
            if not isinstance(node, dict):
                node = base[key] = {}
            _merge(node, value, source, origins, here)
            continue
        if isinstance(value, _EnvValue):
            base[key] = value.value
            origins[here] = f"environment variable {value.name}"
        else:
            base[key] = value
            origins[here] = source
        for stale in [loc for loc in origins if len(loc) > len(here) and loc[: len(here)] == here]:
            del origins[stale]


def _problems(exc: ValidationError, origins: Mapping[Loc, str], fallback: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        loc: Loc = tuple(error["loc"])
        problems.append(ConfigProblem(_origin(loc, origins, fallback), _dotted(loc), _message(error)))
    return problems


def _origin(loc: Loc, origins: Mapping[Loc, str], fallback: str) -> str:
    for end in range(len(loc), 0, -1):
        found = origins.get(loc[:end])
        if found is not None:
            return found
    # An error on a table (a missing key, a cross-field check): blame whoever set keys in it.
    under = sorted({src for key, src in origins.items() if key[: len(loc)] == loc})
    return under[0] if len(under) == 1 else fallback


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _check_files(config: GatewayConfig, origins: Mapping[Loc, str]) -> None:
    problems: list[ConfigProblem] = []
    for index, agent in enumerate(config.agents):
        if agent.system_prompt_file is not None and not agent.system_prompt_file.is_file():
            loc: Loc = ("agents", index, "system_prompt_file")
            problems.append(
                ConfigProblem(
                    _origin(loc, origins, DEFAULTS_SOURCE),
                    _dotted(loc),
                    f"file not found: {agent.system_prompt_file}",
                )
            )
    if problems:
        raise ConfigError(problems)
