"""Running shell commands: the `CommandRunner` seam and the local implementation.

`bash` never starts processes itself; it hands the command to a `CommandRunner`. The default
`LocalRunner` runs ``bash -c`` on this machine; the gateway's sandbox supplies runners that
confine the command. All of them share `run_process`, which owns the hard parts:

- the child starts in its own session (so its own process group); a timeout, an abort or the
  cancellation of the awaiting task kills the whole group (SIGTERM, then SIGKILL after a grace
  period), so forked and backgrounded children die too;
- stdout and stderr share one pipe that we own, read as it arrives; only the last
  `output_cap_bytes` are kept (`TailBuffer`), so memory does not grow with the output;
- the child is always reaped and the pipe always closed before `run_process` returns or raises.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shutil
import signal as signals
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

from agent_core.abort import AbortSignal
from agent_core.errors import ToolError

OutputCallback = Callable[[str], None]
"""Receives decoded output as it arrives (stdout and stderr interleaved)."""

DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024
DEFAULT_KILL_GRACE_S = 2.0
DEFAULT_DRAIN_GRACE_S = 0.5


class CommandResult(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """How a command ended. `output` is the tail of its combined output (at most the cap)."""

    exit_code: int | None
    """The exit status; negative when a signal ended it; ``None`` if it never started."""
    output: str
    truncated: bool
    """True when the start of the output was dropped to respect the cap."""
    timed_out: bool = False
    aborted: bool = False
    total_bytes: int = 0
    timeout_s: float | None = None
    """The timeout that applied to the run (after any runner cap)."""


class CommandRunner(Protocol):
    """Runs one shell command line and reports how it ended.

    `env` of ``None`` means the runner's default environment. The runner must enforce the
    timeout, honour the abort signal (killing everything the command started), stream output to
    `on_output`, and bound the memory the output takes. A failure to start raises `ToolError`;
    a command that runs and fails is a `CommandResult`, not an exception.
    """

    async def run(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        timeout_s: float | None,
        signal: AbortSignal | None,
        on_output: OutputCallback | None,
    ) -> CommandResult: ...


class TailBuffer:
    """Keeps the last `cap` bytes written. Memory stays below twice the cap whatever is written."""

    def __init__(self, cap: int) -> None:
        if cap <= 0:
            raise ValueError("cap must be positive")
        self._cap = cap
        self._data = bytearray()
        self.total_bytes = 0

    def write(self, data: bytes) -> None:
        self.total_bytes += len(data)
        if len(data) >= self._cap:
            self._data = bytearray(data[-self._cap :])
            return
        self._data += data
        if len(self._data) > 2 * self._cap:
            del self._data[: -self._cap]

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self._cap

    def text(self) -> str:
        """The kept tail decoded as UTF-8 (a character cut at the start is dropped)."""
        data = bytes(self._data[-self._cap :])
        if self.truncated:
            # Skip continuation bytes of a character whose first byte was dropped.
            skip = 0
            while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
                skip += 1
            data = data[skip:]
        return data.decode("utf-8", errors="replace")


class _PipeReader(asyncio.Protocol):
    """Feeds the output pipe into a `TailBuffer` and the caller's callback."""

    def __init__(self, buffer: TailBuffer, on_output: OutputCallback | None) -> None:
        self._buffer = buffer
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.callback_error: BaseException | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._buffer.write(data)
        self._emit(self._decoder.decode(data))

    def detach(self) -> None:
        """Stop calling back: the caller has its result and may have moved on."""
        self._on_output = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._emit(self._decoder.decode(b"", final=True))
        if not self.closed.done():
            self.closed.set_result(None)

    def _emit(self, text: str) -> None:
        if not text or self._on_output is None or self.callback_error is not None:
            return
        try:
            self._on_output(text)
        except Exception as exc:  # re-raised by run_process once the child is reaped
            self.callback_error = exc


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _wait_for_end(
    proc: asyncio.subprocess.Process, signal: AbortSignal | None, timeout_s: float | None
) -> Literal["exited", "timeout", "aborted"]:
    exit_task: asyncio.Future[Any] = asyncio.ensure_future(proc.wait())
    waiters: set[asyncio.Future[Any]] = {exit_task}
    abort_task: asyncio.Future[Any] | None = None
    if signal is not None:
        abort_task = asyncio.ensure_future(signal.wait())
        waiters.add(abort_task)
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pending = [task for task in waiters if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    if exit_task in done:
        return "exited"
    if abort_task is not None and abort_task in done:
        return "aborted"
    return "timeout"


async def _terminate_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the group, give it `grace_s`, then SIGKILL whatever is left and reap the leader."""
    _signal_group(proc.pid, signals.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), grace_s)
    # Always follow with SIGKILL: group members may ignore SIGTERM or outlive the leader.
    _signal_group(proc.pid, signals.SIGKILL)
    await proc.wait()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    timeout_s: float | None,
    signal: AbortSignal | None,
    on_output: OutputCallback | None,
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
    kill_group_on_exit: bool = False,
) -> CommandResult:
    """Run `argv` in a new process group and collect its combined output.

    After the leader exits, output is drained until end of file or for `drain_grace_s` (a
    backgrounded child may hold the pipe open). `kill_group_on_exit` then kills what is left of
    the group, so nothing the command started outlives the call. Raises `ToolError` when the
    program cannot be started; re-raises an exception from `on_output` once the child is reaped.
    """
    if signal is not None and signal.aborted:
        return CommandResult(exit_code=None, output="", truncated=False, aborted=True)
    if not os.path.isdir(cwd):  # noqa: ASYNC240 - one stat, not worth a thread
        raise ToolError(f"Working directory {cwd} does not exist or is not a directory")
    loop = asyncio.get_running_loop()
    buffer = TailBuffer(output_cap_bytes)
    read_fd, write_fd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        raise ToolError(f"Could not start {argv[0]}: {exc.strerror or exc}") from exc
    finally:
        os.close(write_fd)
    reader = _PipeReader(buffer, on_output)
    # Wrapping an existing descriptor does no I/O; the transport owns and closes the file.
    pipe = open(read_fd, "rb", buffering=0)  # noqa: SIM115, ASYNC230
    transport: asyncio.BaseTransport | None = None
    outcome: Literal["exited", "timeout", "aborted"] = "exited"
    try:
        transport, _ = await loop.connect_read_pipe(lambda: reader, pipe)
        outcome = await _wait_for_end(proc, signal, timeout_s)
        if outcome != "exited":
            await _terminate_group(proc, kill_grace_s)
        elif kill_group_on_exit:
            _signal_group(proc.pid, signals.SIGKILL)  # leftovers die now; their output is moot
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader.closed), drain_grace_s)
    except BaseException:
        _signal_group(proc.pid, signals.SIGKILL)
        await asyncio.shield(proc.wait())
        raise
    finally:
        reader.detach()
        if transport is not None:
            transport.close()
        else:
            pipe.close()
    if reader.callback_error is not None:
        raise reader.callback_error
    return CommandResult(
        exit_code=proc.returncode,
        output=buffer.text(),
        truncated=buffer.truncated,
        timed_out=outcome == "timeout",
        aborted=outcome == "aborted",
        total_bytes=buffer.total_bytes,
        timeout_s=timeout_s,
    )


def effective_timeout(requested: float | None, maximum: float | None) -> float | None:
    """The smaller of two optional timeouts (``None`` is no limit)."""
    if requested is None:
        return maximum
    if maximum is None:
        return requested
    return min(requested, maximum)


def find_shell() -> str:
    """Path of bash (``sh`` as a fallback); raises `ToolError` when neither exists."""
    for name in ("bash", "sh"):
        found = shutil.which(name)
        if found:
            return found
    raise ToolError("No shell found: install bash or make it available on PATH")


class ShellRunner:
    """A `CommandRunner` that hands ``bash -c`` to `run_process` under a timeout cap.

    The base for `LocalRunner` and for confining runners: a subclass chooses where the command
    runs (`workdir`), what starts it (`argv`), what environment it sees (`child_env`) and whether
    what it leaves behind is killed when it ends (`kill_group_on_exit`). `max_timeout_s` caps every
    call's timeout; `output_cap_bytes` bounds the kept output.
    """

    kill_group_on_exit = False

    def __init__(
        self,
        *,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        max_timeout_s: float | None = None,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        self.output_cap_bytes = output_cap_bytes
        self.max_timeout_s = max_timeout_s
        self.kill_grace_s = kill_grace_s

    def workdir(self, cwd: Path) -> Path:
        """The directory the command runs in."""
        return cwd

    def argv(self, command: str, cwd: Path) -> list[str]:
        """The program and arguments that run `command` in `cwd`."""
        return [find_shell(), "-c", command]

    def child_env(self, env: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """The environment the command sees, given the caller's (``None``: inherit ours)."""
        return env

    async def run(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        timeout_s: float | None,
        signal: AbortSignal | None,
        on_output: OutputCallback | None,
    ) -> CommandResult:
        workdir = self.workdir(cwd)
        return await run_process(
            self.argv(command, workdir),
            cwd=workdir,
            env=self.child_env(env),
            timeout_s=effective_timeout(timeout_s, self.max_timeout_s),
            signal=signal,
            on_output=on_output,
            output_cap_bytes=self.output_cap_bytes,
            kill_grace_s=self.kill_grace_s,
            kill_group_on_exit=self.kill_group_on_exit,
        )


class LocalRunner(ShellRunner):
    """Runs commands with ``bash -c`` on this machine, in the caller's environment.

    No confinement: the command sees the whole file system and network, and background
    processes it starts may outlive the call (they are killed on timeout or abort only).
    `max_timeout_s` caps every call's timeout; `output_cap_bytes` bounds the kept output.
    """

    def __init__(
        self,
        *,
        shell: str | None = None,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        max_timeout_s: float | None = None,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        super().__init__(
            output_cap_bytes=output_cap_bytes, max_timeout_s=max_timeout_s, kill_grace_s=kill_grace_s
        )
        self._shell = shell

    def argv(self, command: str, cwd: Path) -> list[str]:
        return [self._shell or find_shell(), "-c", command]
