"""The extension host over a real store: pending extensions are not imported, enabling loads at
once, disabling withdraws everything, and a broken extension is contained."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent_core.providers import get_api_provider
from gateway.extensions import registered_commands
from gateway.extensions.python_extensions import ExtensionHost
from gateway.extensions.trust import TrustState, TrustStore
from sessions import Store
from tests.gateway.extensions.support import DIST

GOOD = """
from gateway.extensions.extension_api import Extension

def register(ext: Extension) -> None:
    @ext.tool("shout", "Shout.", {"type": "object", "properties": {"text": {"type": "string"}}})
    async def shout(args, ctx):
        return args["text"].upper()

    @ext.command("shout", "Shout back")
    async def shout_command(ctx):
        return ctx.args.upper()

    ext.provider("shout-api", lambda model, context, options: None)
"""
BROKEN_REGISTER = """
def register(ext):
    @ext.command("half", "registered before the failure")
    async def half(ctx):
        return ""
    raise RuntimeError("register fails on purpose")
"""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.open(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}") as opened:
        yield opened


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "extensions").mkdir(parents=True)
    return tmp_path / "home"


@pytest.fixture
def host(home: Path, store: Store) -> Iterator[ExtensionHost]:
    host = ExtensionHost(home, TrustStore(store.database))
    yield host
    for loaded in host.loaded():
        host._unload(loaded.name)
    for name in [m for m in sys.modules if m.startswith("gateway_extension_")]:
        del sys.modules[name]


def row(host: ExtensionHost, name: str) -> dict[str, object]:
    return next(r for r in host.status() if r["name"] == name)


async def test_pending_extensions_are_not_imported_and_enabling_loads_them(
    host: ExtensionHost, home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    (home / "extensions" / "shout.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('x')\n" + GOOD
    )
    await host.refresh()
    assert row(host, "shout")["state"] == "pending" and not row(host, "shout")["loaded"]
    assert not marker.exists() and host.loaded() == []
    await host.set_state("shout", TrustState.ENABLED, "root credential")
    assert marker.read_text() == "x"
    status = row(host, "shout")
    assert status["loaded"] and status["tools"] == ["shout"] and status["commands"] == ["shout"]
    assert status["changedBy"] == "root credential"
    assert [command.name for command in registered_commands()] == ["shout"]
    assert get_api_provider("shout-api") is not None
    assert [tool.name for _, tool in host.tools()] == ["shout"]
    await host.set_state("shout", TrustState.DISABLED, "root credential")
    assert host.loaded() == [] and registered_commands() == ()
    assert get_api_provider("shout-api") is None
    await host.refresh()  # a disabled extension stays unloaded
    assert not row(host, "shout")["loaded"]


async def test_an_enabled_extension_loads_again_after_a_restart(home: Path, store: Store) -> None:
    (home / "extensions" / "shout.py").write_text(GOOD)
    first = ExtensionHost(home, TrustStore(store.database))
    await first.refresh()
    await first.set_state("shout", TrustState.ENABLED, "root credential")
    first._unload("shout")
    second = ExtensionHost(home, TrustStore(store.database))
    await second.refresh()
    assert [loaded.name for loaded in second.loaded()] == ["shout"]
    second._unload("shout")


async def test_a_failing_register_is_contained_and_undone(host: ExtensionHost, home: Path) -> None:
    (home / "extensions" / "broken.py").write_text(BROKEN_REGISTER)
    (home / "extensions" / "syntax.py").write_text("def register(:\n")
    (home / "extensions" / "shout.py").write_text(GOOD)
    await host.refresh()
    for name in ("broken", "syntax", "shout"):
        await host.set_state(name, TrustState.ENABLED, "root credential")
    assert row(host, "broken")["error"] == "RuntimeError: register fails on purpose"
    assert str(row(host, "syntax")["error"]).startswith("SyntaxError")
    assert [loaded.name for loaded in host.loaded()] == ["shout"]
    assert [command.name for command in registered_commands()] == ["shout"]


async def test_a_name_taken_by_another_extension_fails_the_second(host: ExtensionHost, home: Path) -> None:
    (home / "extensions" / "shout.py").write_text(GOOD)
    (home / "extensions" / "again.py").write_text(GOOD)
    await host.refresh()
    await host.set_state("again", TrustState.ENABLED, "root credential")
    await host.set_state("shout", TrustState.ENABLED, "root credential")
    assert (
        row(host, "shout")["error"]
        == "ExtensionApiError: tool 'shout' is already registered by extension again"
    )
    assert [loaded.name for loaded in host.loaded()] == ["again"]


async def test_an_entry_point_extension_is_found_and_loaded(
    host: ExtensionHost, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    monkeypatch.setenv("HELLO_EXT_IMPORTED", str(marker))
    monkeypatch.syspath_prepend(str(DIST))
    monkeypatch.delitem(sys.modules, "hello_gateway_ext", raising=False)
    await host.refresh()
    assert row(host, "hello")["state"] == "pending" and not marker.exists()
    await host.set_state("hello", TrustState.ENABLED, "root credential")
    assert marker.read_text() == "imported\n"
    assert row(host, "hello")["hooks"] == ["message_end", "before_tool_call"]
    monkeypatch.delitem(sys.modules, "hello_gateway_ext", raising=False)


async def test_an_approved_name_found_elsewhere_is_withdrawn(host: ExtensionHost, home: Path) -> None:
    (home / "extensions" / "shout.py").write_text(GOOD)
    await host.refresh()
    await host.set_state("shout", TrustState.ENABLED, "root credential")
    (home / "extensions" / "shout.py").unlink()
    (home / "extensions" / "shout").mkdir()
    (home / "extensions" / "shout" / "__init__.py").write_text(GOOD)
    await host.refresh()
    assert row(host, "shout")["state"] == "pending" and host.loaded() == []
