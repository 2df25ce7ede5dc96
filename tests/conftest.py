"""Suite-wide guards.

Every test runs with `GATEWAY_HOME` (and `HOME`) pointed at a fresh temporary directory, and an
audit hook fails any test that opens a file under the real gateway home or connects a socket to an
address that is not loopback. Daemons started by tests inherit the temporary environment, which
has no terminal size (COLUMNS, LINES) in it.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.exclusive import MARKER as EXCLUSIVE_MARKER
from tests.exclusive import MachineLock, worker_lock

_REAL_HOME = Path(os.environ.get("GATEWAY_HOME") or Path.home() / ".gateway").resolve()
_violations: list[str] = []
_armed = False


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _check_address(address: Any) -> str | None:
    host = address[0] if isinstance(address, tuple) and address else None
    if isinstance(host, str) and not _is_loopback(host):
        return f"connection to non-loopback address {address!r}"
    return None


def _check_path(path: Any) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return None
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    if resolved == _REAL_HOME or _REAL_HOME in resolved.parents:
        return f"access to the real GATEWAY_HOME: {resolved}"
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _armed:
        return
    problem: str | None = None
    if event in ("socket.connect", "socket.sendto") and len(args) >= 2:
        sock = args[0]
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
            problem = _check_address(args[1])
    elif event == "socket.getaddrinfo" and args:
        host = args[0]
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if isinstance(host, str) and not _is_loopback(host):
            problem = f"name lookup of non-loopback host {host!r}"
    elif event in ("open", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree") and args:
        problem = _check_path(args[0])
    if problem is not None:
        _violations.append(problem)
        raise PermissionError(f"test isolation: {problem}")


sys.addaudithook(_audit)


def _forget_the_terminal_size() -> None:
    """Children must not inherit a terminal width. pytest imports `readline` early, and GNU
    readline exports COLUMNS and LINES (80x24 from terminfo when there is no terminal) into the C
    environment: every child then inherits them (an xdist worker even sees them in `os.environ`),
    and `gatewayctl` would wrap and truncate its piped output at 80 columns. A width a developer
    exported in their shell must not change what the tests see either."""
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
        os.unsetenv(name)  # also when only the C environment has it (os.environ never saw it)


_forget_the_terminal_size()

_MACHINE_LOCK = pytest.StashKey[MachineLock | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", EXCLUSIVE_MARKER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `exclusive` tests first, then the `slow` ones, then the rest, each group in its
    collected order: pytest-xdist hands tests out in this order. An exclusive test waits for the
    tests running beside it while no new one starts; at the start nothing long is running yet. A
    test of minutes given out last would keep one worker busy long after the others ran out of
    work."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("exclusive") is None,
            item.get_closest_marker("slow") is None,
        )
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_MACHINE_LOCK] = worker_lock(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    lock = session.config.stash.get(_MACHINE_LOCK, None)
    if lock is not None:
        lock.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    lock = item.config.stash.get(_MACHINE_LOCK, None)
    if lock is None:
        return (yield)
    with lock.hold(exclusive=item.get_closest_marker("exclusive") is not None):
        return (yield)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    global _armed
    home = tmp_path_factory.mktemp("gateway-home")
    monkeypatch.setenv("GATEWAY_HOME", str(home))
    monkeypatch.setenv("HOME", str(home.parent / (home.name + "-user")))
    for name in ("GATEWAY_TOKEN", "GATEWAY_CONFIG", "GATEWAY_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "*")
    _violations.clear()
    _armed = True
    try:
        yield home
    finally:
        _armed = False
    if _violations:
        found = "; ".join(dict.fromkeys(_violations))
        _violations.clear()
        pytest.fail(f"test isolation violated: {found}")


@pytest.fixture
def gateway_home(_isolated: Path) -> Path:
    """The temporary state directory this test runs with."""
    return _isolated
