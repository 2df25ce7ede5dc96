"""The suite's own guard: tests cannot reach the network or the real gateway home."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

import tests.conftest as guard


def test_gateway_home_points_at_a_temporary_directory(gateway_home: Path) -> None:
    assert os.environ["GATEWAY_HOME"] == str(gateway_home)
    assert gateway_home != guard._REAL_HOME


def test_non_loopback_connection_is_refused() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(PermissionError, match="non-loopback"):
            sock.connect(("192.0.2.1", 9))
    finally:
        sock.close()
    guard._violations.clear()


def test_loopback_connection_is_allowed() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname(), timeout=2)
    client.close()
    server.close()


def test_opening_the_real_gateway_home_is_refused() -> None:
    with pytest.raises(PermissionError, match="real GATEWAY_HOME"):
        open(guard._REAL_HOME / "token")  # noqa: SIM115
    guard._violations.clear()
