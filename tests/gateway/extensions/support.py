"""Shared pieces of the extension tests: the FastMCP test server and how to reach it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.extensions.mcp_client import HttpTarget, StdioTarget

SERVERS = Path(__file__).parent / "servers"
DIST = Path(__file__).parent / "dist"
"""A tiny distribution with an entry point: on a Python's path, the extension `hello` is found."""
NOTES = SERVERS / "notes_server.py"
PYTHON_PATHS = sorted({sys.prefix, sys.base_prefix, str(SERVERS)})
"""What a sandboxed server needs to read to run this Python and the notes server."""


def stdio_target(tmp: Path, *, env: dict[str, str] | None = None) -> StdioTarget:
    """The notes server as a plain subprocess (no sandbox)."""
    return StdioTarget(
        argv=[sys.executable, str(NOTES), "stdio"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})},
        cwd=tmp,
        stderr_path=tmp / "notes.log",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


class HttpNotes:
    """The notes server over streamable HTTP as a subprocess on a loopback port."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def target(self, headers: dict[str, str] | None = None) -> HttpTarget:
        return HttpTarget(url=self.url, headers=headers or {})

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(NOTES), "http", str(self.port)], stdout=log, stderr=log
            )
        wait_listening(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def wait_exit(self, timeout: float = 10.0) -> int | None:
        return self.proc.wait(timeout) if self.proc is not None else None


@contextmanager
def http_notes(directory: Path) -> Iterator[HttpNotes]:
    server = HttpNotes(free_port(), directory / "notes-http.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
