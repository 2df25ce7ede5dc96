"""One `gatewayctl` invocation: where the gateway is, how to reach it, how to show results.

Commands receive a `Ctl` and use `ctl.connect()` (an async context manager yielding a connected
`GatewayClient`) and `ctl.call(client, method, params)`, which turn every failure into a
`CtlError` with the right exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from gateway.cli.ctl_errors import CtlError, ExitCode, call_error, connect_error, dropped
from gateway.cli.ctl_output import Output
from gateway.cli.ctl_target import Target, resolve_target
from gateway.client import CallError, ConnectError, GatewayClient, GatewayUnreachable, MessageTooBig

CLIENT_ID = "gatewayctl"
SCOPES = ("operator.read", "operator.write", "operator.admin", "operator.approvals")
CAPS = ("session-scoped-events", "native-events-only")
"""Only events of the sessions this connection subscribes to (not every session's `agent`/`chat`)."""


class Ctl:
    def __init__(
        self,
        out: Output,
        *,
        url: str | None = None,
        token: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.out = out
        self.timeout = timeout
        self._flags = (url, token, password)
        self._env = os.environ if env is None else env
        self._target: Target | None = None
        self.interrupt_exit: int = ExitCode.INTERRUPTED
        """Exit code on Ctrl-C (`sessions tail` makes it 0: Ctrl-C is how one stops following)."""
        self.interrupt_hint: str | None = None
        """What to tell the user after Ctrl-C, when there is something to say."""

    @property
    def target(self) -> Target:
        """Resolved on first use, so `--help` and usage errors never read config or token files."""
        if self._target is None:
            url, token, password = self._flags
            self._target = resolve_target(url=url, token=token, password=password, env=self._env)
        return self._target

    # --- connecting ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[GatewayClient]:
        client = await self.open_client()
        try:
            yield client
        finally:
            await client.aclose()

    async def open_client(self, *, quiet: bool = False) -> GatewayClient:
        """A connected client. A gateway that is still starting is retried until `timeout`.

        Raises CtlError (exit 3 unreachable, 4 refused credentials).
        """
        target = self.target
        deadline = time.monotonic() + self.timeout
        spinner = contextlib.nullcontext() if quiet else self.out.waiting(f"connecting to {target.url}")
        with spinner:
            while True:
                client = GatewayClient(
                    target.url,
                    token=target.token,
                    password=target.password,
                    scopes=SCOPES,
                    caps=CAPS,
                    client_id=CLIENT_ID,
                    mode="cli",
                    open_timeout=self.timeout,
                )
                try:
                    await client.connect()
                    return client
                except ConnectError as exc:
                    starting = exc.code == "UNAVAILABLE" and not isinstance(exc, GatewayUnreachable)
                    if starting and time.monotonic() < deadline:
                        await asyncio.sleep(0.25)
                        continue
                    raise connect_error(
                        exc, url=target.url, credential_hint=target.credential_hint()
                    ) from None

    # --- calling ------------------------------------------------------------------------------

    async def call(
        self, client: GatewayClient, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any:
        """The payload of `method`, or CtlError: the gateway's refusal (exit 1, or 4 for a missing
        scope), no answer within the timeout (exit 1), or a dropped connection (exit 3)."""
        limit = self.timeout if timeout is None else timeout
        with self._translated(method, limit):
            return await client.call(method, params, timeout=limit)

    async def call_final(self, client: GatewayClient, method: str, params: Any = None) -> Any:
        """The final payload of a method that answers twice on one id (`agent`: `accepted` at
        once, the outcome when the run ends, however long that takes); the only payload of any
        other method. Fails like `call`."""
        with self._translated(method, self.timeout):
            response = await client.request(method, params, timeout=self.timeout)
            if not response.get("ok"):
                raise CallError(response.get("error") or {})
            final = response.get("_final")
            if final is not None:
                response = await final
                if not response.get("ok"):
                    raise CallError(response.get("error") or {})
            return response.get("payload")

    @contextlib.contextmanager
    def _translated(self, method: str, limit: float) -> Iterator[None]:
        try:
            yield
        except CallError as exc:
            raise call_error(exc, method) from None
        except MessageTooBig as exc:
            raise CtlError(
                f"cannot send {method}: {exc}",
                hint="send less at once (the gateway's limit is [gateway] max_payload in its config)",
            ) from None
        except ConnectError:
            raise dropped(self.target.url, f"waiting for {method}") from None
        except TimeoutError:
            raise CtlError(
                f"no answer to {method} within {limit:g} s",
                hint="the gateway may be overloaded; retry, or raise --timeout",
            ) from None

    async def once(self, method: str, params: Any = None, *, waiting: str | None = None) -> Any:
        """Connect, call `method`, disconnect."""
        async with self.connect() as client:
            with self.out.waiting(waiting or f"waiting for {method}"):
                return await self.call(client, method, params)
