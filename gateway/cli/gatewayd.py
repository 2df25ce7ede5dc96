"""`gatewayd`: run the gateway daemon.

    gatewayd [--config FILE] [--home DIR] [--host HOST] [--port PORT] [--token TOKEN]

Flags override environment variables (GATEWAY_CONFIG, GATEWAY_HOME, GATEWAY_HOST, GATEWAY_PORT,
GATEWAY_TOKEN, GATEWAY_MODEL, ...), which override the config file, which overrides the built-in
defaults. Exit codes: 0 after a clean stop, 1 when the daemon cannot start (state directory in
use, port taken, database unusable), 2 for bad usage or an invalid config file, 128 + the signal
number (130 for Ctrl-C) when a second signal stopped it without waiting.

Stopping: the first SIGINT (Ctrl-C) or SIGTERM drains (runs get `[gateway] shutdown_grace_s`,
the rest are aborted, the event log is flushed) and says on stderr how long it waits for how many
runs. A second one stops the process at once; nothing acknowledged is lost, since everything a
client was told is already in the database, and the next start closes the runs that were in
flight exactly as it does after a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from gateway import __version__
from gateway.cli.uvicorn_import import import_uvicorn

if TYPE_CHECKING:
    import uvicorn
else:
    uvicorn = import_uvicorn()  # Config and Server, without uvicorn's command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gatewayd",
        description="Run the agent gateway daemon.",
        epilog="Environment: GATEWAY_CONFIG, GATEWAY_HOME (default ~/.gateway), GATEWAY_HOST "
        "(default 127.0.0.1), GATEWAY_PORT (default 18789), GATEWAY_TOKEN, GATEWAY_PASSWORD, "
        "GATEWAY_MODEL (provider/model-id, e.g. faux/echo), GATEWAY_LOG_LEVEL, OPENAI_API_KEY, "
        "OPENAI_BASE_URL, ANTHROPIC_API_KEY.",
    )
    parser.add_argument("--config", help="config file (TOML); default: $GATEWAY_CONFIG")
    parser.add_argument("--home", help="state directory; default: $GATEWAY_HOME or ~/.gateway")
    parser.add_argument("--host", help="address to listen on; default 127.0.0.1")
    parser.add_argument("--port", type=int, help="port to listen on (0 picks a free one); default 18789")
    parser.add_argument("--token", help="shared auth token; default: generated into the state directory")
    parser.add_argument("--log-level", help="debug, info, warning or error")
    parser.add_argument("--version", action="version", version=f"gatewayd {__version__}")
    return parser.parse_args(argv)


class GatewayServer(uvicorn.Server):
    """uvicorn, with our graceful stop on the first SIGTERM/SIGINT and an immediate one on the
    second (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, gateway: Any) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._draining: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signalled = False
        self.startup_failed = False

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await super().serve(sockets)
        except SystemExit:
            # uvicorn exits the process when the app fails to start; the caller reports it
            # (SystemExit leaving a task would escape asyncio.run with uvicorn's exit code).
            self.startup_failed = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self.gateway.state is None:
            super().handle_exit(sig, frame)
            return
        if self._signalled:
            stop_now(sig)
        self._signalled = True
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._draining is None:
            say(stopping_line(self.gateway))
            self._draining = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        try:
            await self.gateway.drain(reason="gateway stopping")
        finally:
            self.should_exit = True


def stopping_line(gateway: Any) -> str:
    """What the first Ctrl-C does, in one line: how long it waits for how many runs."""
    runs = gateway.state.manager.running_count() if gateway.state is not None else 0
    grace = gateway.config.gateway.shutdown_grace_s
    if not runs:
        return "gatewayd: stopping (press Ctrl-C again to stop at once)"
    what, them = ("1 run", "it") if runs == 1 else (f"{runs} runs", "them")
    return (
        f"gatewayd: stopping: waiting up to {grace:g} s for {what} in flight to finish "
        f"(press Ctrl-C again to stop at once; the next start then closes {them} as after a crash)"
    )


def stop_now(sig: int) -> NoReturn:
    """The second signal: leave at once, as a crash would (the database is always consistent;
    the next start closes the runs that were in flight)."""
    say("gatewayd: stopping now without waiting; the runs in flight are closed when gatewayd next starts")
    os._exit(128 + sig)


def say(line: str) -> None:
    """A line for the operator on stderr (the terminal), apart from the log. Also called from a
    signal handler, which may interrupt a write to the same stream (RuntimeError: reentrant)."""
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    # Start-up creates some 125,000 objects that live as long as the process (modules, classes,
    # validators) and little garbage, yet the cyclic collector would walk them over and over while
    # they are made (a tenth of the start-up). It stays off until the server listens, and then
    # `_collect_from_now_on` freezes them out of every later collection.
    gc.disable()
    try:
        return _run(argv)
    finally:
        gc.enable()


def _collect_from_now_on(young_threshold: int) -> None:
    """Move everything start-up made to the collector's permanent generation and turn it back
    on, collecting the youngest generation every `young_threshold` allocations (`[gateway]
    collector_young_threshold`; the older generations keep their default ratios). At Python's
    700, 400 sessions starting at once made 650 young, 58 middle and 5 full collections (up to
    170 ms each, every live session's tools and context walked, the event loop stopped); at the
    default 20,000, 15 young and one middle (docs/performance.md). The garbage start-up left in
    cycles (under a thousand objects) stays with them."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
    gc.enable()


def _run(argv: list[str] | None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    for flag, name in (
        ("home", "GATEWAY_HOME"),
        ("host", "GATEWAY_HOST"),
        ("port", "GATEWAY_PORT"),
        ("token", "GATEWAY_TOKEN"),
        ("log_level", "GATEWAY_LOG_LEVEL"),
    ):
        value = getattr(args, flag)
        if value is not None:
            env[name] = str(value)
    config_path = args.config or env.get("GATEWAY_CONFIG") or None

    from gateway.logging import configure_logging, import_structlog_for

    # Before any module imports structlog: the console extras load only for a terminal.
    import_structlog_for(sys.stderr)
    from gateway.config import load_config
    from gateway.errors import ConfigError

    try:
        config = load_config(Path(config_path) if config_path else None, env)
    except ConfigError as exc:
        print(f"gatewayd: {exc}", file=sys.stderr)
        return 2
    configure_logging(level=config.logging.level, fmt=config.logging.format)
    if config.bindings:
        from gateway.channel_config import validate_bindings

        try:
            validate_bindings(config, env)
        except ConfigError as exc:
            print(f"gatewayd: {exc}", file=sys.stderr)
            return 2
    if config.webhooks:
        from gateway.automation import load_hooks

        try:
            load_hooks(config, env)
        except ConfigError as exc:
            print(f"gatewayd: {exc}", file=sys.stderr)
            return 2

    from gateway.auth import AuthConfig, load_or_create_token, require_auth_for_bind
    from gateway.errors import InsecureBindError, TokenFileError
    from sessions.errors import StateDirLocked
    from sessions.lock import StateDirLock

    home = config.home
    try:
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o700)
    except OSError as exc:
        print(f"gatewayd: cannot use state directory {home}: {exc}", file=sys.stderr)
        return 1
    lock = StateDirLock(home)
    try:
        lock.acquire()
    except StateDirLocked as exc:
        print(f"gatewayd: {exc}", file=sys.stderr)
        return 1
    try:
        token = config.gateway.token.get_secret_value() if config.gateway.token else None
        password = config.gateway.password.get_secret_value() if config.gateway.password else None
        # A non-loopback address needs a secret the operator chose: a token generated into the
        # state directory is fine on loopback only.
        try:
            require_auth_for_bind(config.gateway.host, AuthConfig(token=token, password=password))
        except InsecureBindError as exc:
            print(f"gatewayd: {exc}", file=sys.stderr)
            return 2
        token_note = None
        if config.clustered and token is None and password is None:
            # Every node must accept the same credential: a token file per state directory
            # would differ from node to node.
            print(
                "gatewayd: a cluster node needs the shared credential: set GATEWAY_TOKEN "
                "(or [gateway] token) to the same value on every node",
                file=sys.stderr,
            )
            return 2
        if token is None and password is None:
            try:
                token, created = load_or_create_token(home)
            except TokenFileError as exc:
                print(f"gatewayd: {exc}", file=sys.stderr)
                return 1
            token_note = f"{'generated a new' if created else 'using the'} auth token in {home / 'token'}"
        return asyncio.run(_serve(config, token, password, token_note, env))
    finally:
        lock.release()


def server_config(app: Any, config: Any, door: Any) -> uvicorn.Config:
    """uvicorn's settings: HTTP/1.1 (httptools) and the sans-I/O WebSocket protocol, both with
    the front door (`gateway.door`) at accept. `proxy_headers` is off: the address a connection's
    limits and logs name is the peer's own, never one a client wrote into `X-Forwarded-For`."""
    from gateway.door_protocols import door_protocols

    http, ws = door_protocols(door)
    return uvicorn.Config(
        app,
        host=config.gateway.host,
        port=config.gateway.port,
        http=http,
        ws=ws,
        ws_max_size=config.gateway.max_payload,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        proxy_headers=False,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


async def _serve(
    config: Any, token: str | None, password: str | None, token_note: str | None, env: dict[str, str]
) -> int:
    from gateway.allocator import limit_arenas, release_large_blocks
    from gateway.app import Gateway, create_app, door_settings
    from gateway.auth import is_wildcard_host
    from gateway.door import Door

    release_large_blocks()
    limit_arenas()  # before the database and the executor start their threads
    door = Door(door_settings(config))
    gateway = Gateway(config, token=token, password=password, env=env, door=door)
    app = create_app(gateway)
    uv_config = server_config(app, config, door)
    try:
        sock = listening_socket(config.gateway.host, config.gateway.port)
    except OSError as exc:
        print(
            f"gatewayd: cannot listen on {config.gateway.host}:{config.gateway.port}: {exc.strerror or exc}"
            " (is another gateway running? choose another --port)",
            file=sys.stderr,
        )
        return 1
    server = GatewayServer(uv_config, gateway)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():  # noqa: ASYNC110 - uvicorn exposes a flag only
        await asyncio.sleep(0.01)
    if serving.done():
        with contextlib.suppress(BaseException):
            await serving
        reason = gateway.start_error
        detail = f": {reason}" if reason is not None else "; see the log above"
        print(f"gatewayd: could not start{detail}", file=sys.stderr)
        return 1
    _collect_from_now_on(config.gateway.collector_young_threshold)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    state = gateway.state
    problem = state.directory.model_problem() if state is not None else None
    lines = [
        f"gatewayd {__version__} listening on ws://{shown}:{port}/",
        f"dashboard: http://{shown}:{port}/ui/",
        f"state directory: {config.home}",
        f"model: {state.directory.default_model_label() if state else '?'}",
    ]
    if gateway.tools is not None:
        lines.append(gateway.tools.banner())
    if token_note:
        lines.append(token_note)
    if problem:
        lines.append(f"warning: {problem}; runs will fail until one is configured")
    if is_wildcard_host(config.gateway.host) and not config.gateway.allowed_hosts:
        lines.append(
            "warning: listening on every interface, but only loopback names are accepted in the Host "
            "header; list the names clients use in gateway.allowed_hosts"
        )
    print("\n".join(lines), flush=True)
    await serving
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    """The daemon's listening TCP socket on `host`:`port` (IPv6 when the host has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Naming the protocol matters: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # accepted sockets whose protocol reads as TCP, and a socket made with protocol 0 reads as 0.
    # With Nagle on, a small frame written while the previous one is unacknowledged waits for
    # the client's delayed ACK (40 ms on Linux): a run's first events after `chat.send`'s reply.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "signal"]
