"""`Extensions`, what the daemon starts: nothing of MCP or of the extension host is imported when
nothing is configured or installed; a configured server's tools reach a run, and a reload that
removes the table takes them away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.bridge import Bridge
from gateway.config import load_config
from gateway.extensions.runtime import Extensions
from gateway.hub import Hub
from gateway.sandbox import SandboxMachine, SandboxSettings
from sessions import Store
from tests.gateway.extensions.support import NOTES

ROOT = Path(__file__).resolve().parents[3]
PROBE = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from gateway.bridge import Bridge
    from gateway.config import load_config
    from gateway.extensions.runtime import Extensions
    from gateway.hub import Hub
    from gateway.sandbox import SandboxMachine
    from sessions import Store

    async def main() -> None:
        config = load_config(None)
        async with Store.open(config.database_url) as store:
            machine = SandboxMachine(home=config.home)
            extensions = Extensions(config, database=store.database, bridge=Bridge(Hub()),
                                    machine=machine, env={})
            await extensions.start()
            await extensions.aclose()
            machine.close()
        # (`gateway.extensions.mcp_config`, the settings model, is part of the configuration.)
        heavy = ("mcp_client", "mcp_server", "mcp_registry", "mcp_launch", "mcp_tools",
                 "mcp_results", "python_extensions", "trust", "lifecycle_hooks", "tool_hooks")
        loaded = [name for name in sys.modules if name == "mcp" or name.startswith("mcp.")
                  or name.removeprefix("gateway.extensions.") in heavy]
        print(json.dumps(loaded))

    asyncio.run(main())
    """
)


def test_nothing_configured_imports_nothing_of_mcp_or_the_extension_host(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "GATEWAY_HOME": str(home), "HOME": str(tmp_path)}
    env.pop("GATEWAY_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.open(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}") as opened:
        yield opened


async def test_a_configured_server_reaches_runs_until_a_reload_removes_it(
    tmp_path: Path, store: Store
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[[mcp_servers]]\nname = "notes"\ncommand = "{sys.executable}"\nargs = ["{NOTES}", "stdio"]\n'
        "sandbox = false\n"
    )
    env = {"HOME": str(tmp_path), "GATEWAY_HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"]}
    config = load_config(path, env=env)
    machine = SandboxMachine(home=config.home)
    extensions = Extensions(config, database=store.database, bridge=Bridge(Hub()), machine=machine, env=env)
    await extensions.start()
    try:
        assert extensions.active("main")
        sandbox = SandboxSettings(workspace=tmp_path / "ws", mode="unsafe-host")
        extras = await extensions.run_extras("main", sandbox, lambda record: None, "s1")
        assert "notes__add" in {tool.name for tool in extras.tools}
        assert extensions.mcp_status()[0]["state"] == "ready"
        path.write_text("")
        await extensions.reload(load_config(path, env=env))
        assert not extensions.active("main")
        assert extensions.mcp_status() == []
    finally:
        await extensions.aclose()
        machine.close()
