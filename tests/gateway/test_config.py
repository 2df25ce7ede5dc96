from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gateway.config import (
    DEFAULT_SYSTEM_PROMPT,
    GatewayConfig,
    config_hash,
    load_config,
    redacted,
)
from gateway.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A minimal environment: HOME in the temp dir, nothing else."""
    return {"HOME": str(tmp_path / "user")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error_of(path: Path | None, env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, env)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults ---------------------------------------------------------------------------------


def test_defaults(env: dict[str, str], tmp_path: Path) -> None:
    config = load_config(None, env)
    assert (config.gateway.host, config.gateway.port) == ("127.0.0.1", 18789)
    assert config.gateway.token is None and config.gateway.password is None
    assert config.home == tmp_path / "user" / ".gateway"
    assert config.database_url == f"sqlite+aiosqlite:///{tmp_path / 'user' / '.gateway' / 'gateway.db'}"
    assert config.runs.max_duration_s == 48 * 3600
    assert config.runs.idle_timeout_s == 120
    assert config.gateway.max_payload == 25 * 1024 * 1024
    assert config.gateway.tick_interval_ms == 30_000
    assert config.agent_ids == ("main",)
    assert set(config.providers) == {"openai", "anthropic"}
    assert config.source_path is None


def test_the_repository_defaults_file_equals_the_built_in_defaults() -> None:
    data = tomllib.loads((REPO / "config" / "gateway.toml").read_text())
    assert GatewayConfig.model_validate(data).model_dump() == GatewayConfig().model_dump()


def test_the_repository_system_prompt_equals_the_built_in_one() -> None:
    assert (REPO / "config" / "agents" / "main" / "SYSTEM.md").read_text() == DEFAULT_SYSTEM_PROMPT


def test_the_repository_config_loads_and_finds_its_system_prompt(env: dict[str, str]) -> None:
    config = load_config(REPO / "config" / "gateway.toml", env)
    agent = config.resolve_agent("main")
    assert agent.system_prompt_file == REPO / "config" / "agents" / "main" / "SYSTEM.md"
    assert agent.system_prompt() == DEFAULT_SYSTEM_PROMPT


# --- precedence -------------------------------------------------------------------------------


def test_defaults_then_file_then_environment(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "gw.toml",
        """
        [gateway]
        host = "0.0.0.0"
        port = 9000
        token = "from-file"
        [runs]
        max_concurrent = 3
        [agent_defaults]
        model = "anthropic/claude-from-file"
        """,
    )
    from_file = load_config(path, env)
    assert (from_file.gateway.host, from_file.gateway.port, from_file.runs.max_concurrent) == (
        "0.0.0.0",
        9000,
        3,
    )
    assert from_file.gateway.token is not None and from_file.gateway.token.get_secret_value() == "from-file"
    assert from_file.runs.lane_depth == 64  # untouched defaults survive
    assert from_file.source_path == path

    env.update(
        GATEWAY_PORT="9100",
        GATEWAY_TOKEN="from-env",
        GATEWAY_MODEL="openai/gpt-from-env",
        GATEWAY_LOG_LEVEL="DEBUG",
        GATEWAY_HOME=str(tmp_path / "state"),
    )
    from_env = load_config(path, env)
    assert from_env.gateway.host == "0.0.0.0"  # file value, no env override
    assert from_env.gateway.port == 9100
    assert from_env.gateway.token is not None and from_env.gateway.token.get_secret_value() == "from-env"
    assert from_env.agent_defaults.model == "openai/gpt-from-env"
    assert from_env.logging.level == "debug"
    assert from_env.home == tmp_path / "state"
    assert from_env.runs.max_concurrent == 3


def test_gateway_config_variable_names_the_file(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", "[runs]\nmax_concurrent = 2\n")
    env["GATEWAY_CONFIG"] = str(path)
    assert load_config(None, env).runs.max_concurrent == 2
    other = write(tmp_path / "other.toml", "[runs]\nmax_concurrent = 5\n")
    assert load_config(other, env).runs.max_concurrent == 5  # an explicit path wins


def test_empty_environment_values_are_ignored(env: dict[str, str]) -> None:
    env.update(GATEWAY_TOKEN="", GATEWAY_PORT="")
    config = load_config(None, env)
    assert config.gateway.token is None and config.gateway.port == 18789


def test_provider_settings_from_file_and_environment(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "gw.toml",
        """
        [providers.openai]
        base_url = "http://127.0.0.1:9/v1"
        [providers.local]
        api_key_env = "LOCAL_LLM_KEY"
        base_url = "http://127.0.0.1:8000/v1"
        headers = { "Authorization" = "Bearer abcdefghijklmnop" }
        """,
    )
    env.update(
        OPENAI_API_KEY="sk-test-openai-key-1234567890",
        LOCAL_LLM_KEY="local-key",
        ANTHROPIC_BASE_URL="http://127.0.0.1:7",
    )
    config = load_config(path, env)
    openai = config.providers["openai"]
    assert openai.api_key_env == "OPENAI_API_KEY"  # the built-in table is extended, not replaced
    assert openai.base_url == "http://127.0.0.1:9/v1"
    assert openai.api_key is not None and openai.api_key.get_secret_value() == "sk-test-openai-key-1234567890"
    local = config.providers["local"]
    assert local.api_key is not None and local.api_key.get_secret_value() == "local-key"
    assert config.providers["anthropic"].base_url == "http://127.0.0.1:7"
    assert config.providers["anthropic"].api_key is None
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:10/v1"
    assert load_config(path, env).providers["openai"].base_url == "http://127.0.0.1:10/v1"


# --- errors -----------------------------------------------------------------------------------


def test_an_invalid_value_names_the_file_and_the_key(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", "[runs]\nmax_concurrent = 0\n")
    assert (
        error_of(path, env) == f"config error in {path}: runs.max_concurrent: Input should be greater than 0"
    )


def test_an_unknown_key_is_an_error_naming_it(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", '[gateway]\nhots = "x"\n')
    assert error_of(path, env) == f"config error in {path}: gateway.hots: unknown key"
    path = write(tmp_path / "gw2.toml", "[nonsense]\nx = 1\n")
    assert error_of(path, env) == f"config error in {path}: nonsense: unknown key"


def test_errors_inside_agent_tables(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "gw.toml", '[[agents]]\nid = "main"\n[[agents]]\nid = "coder"\nmodel = "no-slash"\n'
    )
    assert error_of(path, env) == (
        f"config error in {path}: agents[1].model: model must be written provider/model-id, got 'no-slash'"
    )
    path = write(tmp_path / "dup.toml", '[[agents]]\nid = "a"\n[[agents]]\nid = "a"\n')
    assert error_of(path, env) == f"config error in {path}: agents: duplicate agent id 'a'"
    path = write(tmp_path / "noid.toml", '[[agents]]\nmodel = "openai/x"\n')
    assert error_of(path, env) == f"config error in {path}: agents[0].id: Field required"


def test_every_problem_is_reported_on_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", "[runs]\nmax_concurrent = -1\nlane_depth = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env)
    assert [p.path for p in info.value.problems] == ["runs.max_concurrent", "runs.lane_depth"]
    assert str(info.value).count("config error in") == 2
    assert "\n" not in str(info.value)


def test_an_invalid_environment_variable_is_named(env: dict[str, str]) -> None:
    env["GATEWAY_PORT"] = "eighty"
    message = error_of(None, env)
    assert message.startswith(
        "config error in environment variable GATEWAY_PORT: gateway.port: Input should be a valid integer"
    )
    env["GATEWAY_PORT"] = "70000"
    assert error_of(None, env) == (
        "config error in environment variable GATEWAY_PORT: gateway.port: "
        "Input should be less than or equal to 65535"
    )
    del env["GATEWAY_PORT"]
    env["GATEWAY_MODEL"] = "gpt"
    assert "environment variable GATEWAY_MODEL: agent_defaults.model" in error_of(None, env)


def test_the_environment_is_blamed_only_for_what_it_set(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", "[gateway]\nport = 80000\n")
    env["GATEWAY_HOST"] = "127.0.0.1"
    assert error_of(path, env).startswith(f"config error in {path}: gateway.port:")


def test_unreadable_files(tmp_path: Path, env: dict[str, str]) -> None:
    missing = tmp_path / "nope.toml"
    assert error_of(missing, env) == f"config error in {missing}: file not found"
    broken = write(tmp_path / "broken.toml", "[gateway\nport = 1\n")
    assert error_of(broken, env).startswith(f"config error in {broken}: invalid TOML: ")


def test_wrong_types_and_empty_secrets(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", '[compaction]\nenabled = "sometimes"\n')
    assert error_of(path, env).startswith(
        f"config error in {path}: compaction.enabled: Input should be a valid boolean"
    )
    path = write(tmp_path / "gw2.toml", '[gateway]\ntoken = ""\n')
    assert (
        error_of(path, env)
        == f"config error in {path}: gateway.token: must not be empty (leave the key out instead)"
    )
    path = write(tmp_path / "gw3.toml", '[sandbox]\nmode = "yolo"\n')
    assert error_of(path, env).startswith(
        f"config error in {path}: sandbox.mode: Input should be 'auto', 'bwrap', 'uid' or 'unsafe-host'"
    )


# --- agents -----------------------------------------------------------------------------------


def test_main_always_exists_and_agents_inherit_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "conf" / "gw.toml",
        """
        [runs]
        default_queue_mode = "followup"
        [agent_defaults]
        model = "anthropic/claude-default"
        [[agents]]
        id = "coder"
        model = "openai/gpt-coder"
        workspace = "work/coder"
        tools_deny = ["bash"]
        queue_mode = "interrupt"
        """,
    )
    config = load_config(path, env)
    assert config.agent_ids == ("coder", "main")
    main = config.resolve_agent("main")
    assert main.model == "anthropic/claude-default"
    assert main.queue_mode == "followup"
    assert main.sandbox_mode == "auto"
    assert main.workspace == config.home / "workspaces" / "main"
    assert main.system_prompt_file == tmp_path / "conf" / "agents" / "main" / "SYSTEM.md"
    assert main.system_prompt() == DEFAULT_SYSTEM_PROMPT  # no file there: the built-in prompt
    coder = config.resolve_agent("coder")
    assert coder.model == "openai/gpt-coder"
    assert coder.workspace == tmp_path / "conf" / "work" / "coder"  # relative to the file
    assert coder.tools_deny == ("bash",) and coder.tools_allow is None
    assert coder.queue_mode == "interrupt"
    with pytest.raises(KeyError):
        config.resolve_agent("ghost")


def test_system_prompt_files(tmp_path: Path, env: dict[str, str]) -> None:
    write(tmp_path / "agents" / "main" / "SYSTEM.md", "You are main.\n")
    write(tmp_path / "prompts" / "coder.md", "You write code.\n")
    path = write(
        tmp_path / "gw.toml",
        '[[agents]]\nid = "coder"\nsystem_prompt_file = "prompts/coder.md"\n',
    )
    config = load_config(path, env)
    assert config.resolve_agent("main").system_prompt() == "You are main.\n"
    assert config.resolve_agent("coder").system_prompt() == "You write code.\n"

    bad = write(
        tmp_path / "bad.toml", '[[agents]]\nid = "coder"\nsystem_prompt_file = "prompts/missing.md"\n'
    )
    assert error_of(bad, env) == (
        f"config error in {bad}: agents[0].system_prompt_file: "
        f"file not found: {tmp_path / 'prompts' / 'missing.md'}"
    )


def test_without_a_file_agent_dirs_live_in_home(tmp_path: Path, env: dict[str, str]) -> None:
    env["GATEWAY_HOME"] = str(tmp_path / "state")
    write(tmp_path / "state" / "agents" / "main" / "SYSTEM.md", "home prompt\n")
    config = load_config(None, env)
    assert config.resolve_agent("main").system_prompt() == "home prompt\n"


def test_tilde_paths(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "gw.toml", '[gateway]\nhome = "~/gwstate"\n')
    assert load_config(path, env).home == tmp_path / "user" / "gwstate"


def test_models_and_bindings(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "gw.toml",
        """
        [[models]]
        id = "qwen"
        provider = "local"
        api = "openai-completions"
        context_window = 32768
        cost = { input = 0.1, output = 0.2 }
        [bindings.discord.main]
        token_env = "DISCORD_BOT_TOKEN"
        guilds = ["123"]
        """,
    )
    config = load_config(path, env)
    model = config.models[0]
    assert (model.id, model.provider, model.context_window, model.cost.output, model.input) == (
        "qwen",
        "local",
        32768,
        0.2,
        ["text"],
    )
    assert config.bindings["discord"]["main"]["guilds"] == ["123"]
    dup = write(
        tmp_path / "dup.toml",
        '[[models]]\nid="a"\nprovider="p"\napi="x"\n[[models]]\nid="a"\nprovider="p"\napi="x"\n',
    )
    assert error_of(dup, env) == f"config error in {dup}: models: duplicate model p/a"


# --- redaction --------------------------------------------------------------------------------


def test_redacted_masks_every_secret(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "gw.toml",
        """
        [gateway]
        password = "pw-in-file"
        [providers.local]
        base_url = "http://127.0.0.1:8000"
        headers = { "Authorization" = "Bearer abcdefghijklmnopqrstuv", "X-Trace" = "on" }
        [bindings.slack.work]
        bot_token = "xoxb-1234567890-abcdefghij"
        bot_token_env = "SLACK_BOT_TOKEN"
        """,
    )
    env.update(GATEWAY_TOKEN="tok-from-env-123", ANTHROPIC_API_KEY="sk-ant-secret-key-abcdefgh")
    config = load_config(path, env)
    view = redacted(config)
    text = json.dumps(view)
    for secret in (
        "pw-in-file",
        "tok-from-env-123",
        "sk-ant-secret-key",
        "abcdefghijklmnopqrstuv",
        "xoxb-1234567890",
    ):
        assert secret not in text, secret
    assert view["gateway"]["token"] == "***" and view["gateway"]["password"] == "***"
    assert view["providers"]["anthropic"]["api_key"] == "***"
    assert view["providers"]["openai"]["api_key"] is None  # unset stays visible as unset
    assert view["providers"]["local"]["headers"] == {"Authorization": "***", "X-Trace": "on"}
    assert view["bindings"]["slack"]["work"] == {"bot_token": "***", "bot_token_env": "SLACK_BOT_TOKEN"}
    assert view["gateway"]["port"] == 18789 and view["gateway"]["home"] == str(config.home)
    assert view["runs"]["max_concurrent"] == 16


def test_config_hash_changes_with_settings_but_not_with_secrets(env: dict[str, str]) -> None:
    base = config_hash(load_config(None, env))
    assert base.startswith("sha256:") and base == config_hash(load_config(None, env))
    assert (
        config_hash(load_config(None, {**env, "GATEWAY_TOKEN": "another-secret"})) != base
    )  # token set vs unset
    with_token = config_hash(load_config(None, {**env, "GATEWAY_TOKEN": "secret-one"}))
    assert with_token == config_hash(load_config(None, {**env, "GATEWAY_TOKEN": "secret-two"}))
    assert config_hash(load_config(None, {**env, "GATEWAY_PORT": "1234"})) != base


def test_config_is_immutable(env: dict[str, str]) -> None:
    config = load_config(None, env)
    with pytest.raises(Exception) as info:
        config.gateway.port = 1  # type: ignore[misc]
    assert "frozen" in str(info.value)


def test_loading_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch, gateway_home: Path) -> None:
    monkeypatch.setenv("GATEWAY_PORT", "4321")
    config: Any = load_config()
    assert config.gateway.port == 4321
    assert config.home == gateway_home
