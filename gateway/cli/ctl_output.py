"""How `gatewayctl` shows things: rich tables and colours for people, one JSON document for scripts.

Rules:
- stdout carries the result only: a rendering for people, or with `--json` exactly one JSON
  document (`sessions tail --json`: one JSON object per line). Colour only when stdout is a
  terminal (and `NO_COLOR` is unset and `--no-color` not given).
- stderr carries everything else: progress spinners (only on a terminal), notes and the one-line
  error. With `--json` a failure also prints `{"ok": false, "error": {...}}` on stdout, so a
  script always has a document to parse.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from gateway.cli.ctl_errors import CtlError

PIPE_WIDTH = 160
"""Line width when writing to a pipe or file (rich would wrap at 80), unless COLUMNS says otherwise."""


def _width(stream: TextIO) -> int | None:
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return None
    return PIPE_WIDTH


class Output:
    def __init__(
        self,
        *,
        json_mode: bool,
        color: bool = True,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.json_mode = json_mode
        self._stdout = stdout or sys.stdout
        no_color = not color or json_mode
        self.out = Console(file=self._stdout, no_color=no_color, highlight=False, width=_width(self._stdout))
        err_file = stderr or sys.stderr
        self.err = Console(file=err_file, no_color=not color, highlight=False, width=_width(err_file))
        self._status: Status | None = None

    # --- results ------------------------------------------------------------------------------

    def result(self, payload: Any, render: Callable[[Console], None]) -> None:
        """Show a command's result: `payload` as JSON with --json, else `render(console)`."""
        if self.json_mode:
            self.json(payload)
        else:
            render(self.out)

    def json(self, payload: Any, *, compact: bool = False) -> None:
        text = json.dumps(payload, ensure_ascii=False, indent=None if compact else 2, default=str)
        self._stdout.write(text + "\n")
        self._stdout.flush()

    def write(self, text: str) -> None:
        """Raw text to stdout, at once (streamed replies)."""
        self._stdout.write(text)
        self._stdout.flush()

    # --- stderr -------------------------------------------------------------------------------

    def note(self, text: str, *, style: str = "dim") -> None:
        """A line for people on stderr; `text` is plain (no markup)."""
        with self.paused():
            self.err.print(escape(text), style=style, soft_wrap=True)

    def error(self, error: CtlError) -> None:
        self.stop_waiting()
        self.err.print(f"[bold red]gatewayctl: error:[/] {escape(error.line())}", soft_wrap=True)
        if self.json_mode:
            self.json(error.to_json())

    # --- progress -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[None]:
        """A spinner on stderr while the block runs (nothing when stderr is not a terminal)."""
        self.start_waiting(text)
        try:
            yield
        finally:
            self.stop_waiting()

    def start_waiting(self, text: str) -> None:
        if not self.err.is_terminal:
            return
        if self._status is None:
            self._status = self.err.status(escape(text), spinner="dots")
            self._status.start()
        else:
            self._status.update(escape(text))

    def stop_waiting(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hide the spinner while something else is printed, then bring it back."""
        status = self._status
        if status is None:
            yield
            return
        status.stop()
        try:
            yield
        finally:
            status.start()
