"""`ChannelLeasing`: in a cluster, each chat account runs on the one node that holds its lease.

A Discord gateway connection or a Slack Socket Mode connection must exist once per account, not
once per node, and so must the relay that posts the account's replies. Each account has a lease,
`channel:<platform>:<account_id>` (`gateway.cluster.leases`), and its binding runs on a node only
while that node holds it:

- Every `interval_s` (the cluster's lease ttl / 4) a pass asks, for each account: one running here,
  is its lease still ours (`held`)? one not running here, can we take its lease (`acquire`)?
  An account whose lease we took is started (`start(binding_id)`, which settles its outbox
  first); one whose lease is gone (this node paused or lost the database past its ttl, and
  another node may have taken it) is stopped at once (`stop(binding_id)`).
- A running account whose lease could not be confirmed for `ttl_s` (the database did not answer)
  is stopped too: by then this node's row may have expired and another node connected.
- `aclose()` stops the running accounts, then releases their leases, so another node connects at
  once and never while this one is still connected.

So an account changes node within ttl + one interval of its node's death, and a node that comes
back stops its stale binding at its next pass. Between those two moments both may be connected
for up to one interval; what they write is fenced by the shared database (inbound dedupe, the
input ledger, the outbox's idempotency keys), not by this module.

State lives as long as the object: the tokens of the leases held here, and the holders seen at
the last pass (for `holder()`, which the status reads without a query).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from sessions.errors import SessionsError

if TYPE_CHECKING:
    from gateway.cluster.leases import Leases

__all__ = ["ChannelLeasing", "lease_name"]

log = structlog.get_logger("gateway.channels")

BindingAction = Callable[[str], Awaitable[None]]


def lease_name(binding_id: str) -> str:
    """The lease of a binding (`<platform>:<account_id>`): `channel:<platform>:<account_id>`."""
    return f"channel:{binding_id}"


class ChannelLeasing:
    """Runs `start(binding_id)` / `stop(binding_id)` for the bindings in `binding_ids` as this node
    gains and loses their leases. `start()` begins the passes; `aclose()` ends them (idempotent).

    `start` and `stop` may raise: a failed start gives the lease back (the next pass, here or on
    another node, tries again); a failed stop is logged and the account counts as stopped.
    `clock` is monotonic seconds (a seam).
    """

    def __init__(
        self,
        leases: Leases,
        binding_ids: Iterable[str],
        *,
        start: BindingAction,
        stop: BindingAction,
        ttl_s: float,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self._ids = tuple(binding_ids)
        self._start = start
        self._stop = stop
        self._ttl_s = ttl_s
        self._interval_s = ttl_s / 4 if interval_s is None else interval_s
        self._clock = clock
        self._tokens: dict[str, int] = {}
        """The bindings running here: binding id -> token of their lease."""
        self._confirmed: dict[str, float] = {}
        """When each running binding's lease was last asked about (and found ours)."""
        self._holders: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def node_id(self) -> str:
        return self._leases.node_id

    def running(self, binding_id: str) -> bool:
        """Whether the binding runs here (this node holds its lease)."""
        return binding_id in self._tokens

    def holder(self, binding_id: str) -> str | None:
        """The node holding the binding's lease: this node while it runs here, else the holder
        seen at the last pass (None: nobody, or not known yet)."""
        if binding_id in self._tokens:
            return self.node_id
        return self._holders.get(lease_name(binding_id))

    def start(self) -> None:
        """Begin the passes (the first at once). Idempotent; nothing after `aclose()`."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="channel-leasing")

    async def aclose(self) -> None:
        """End the passes, stop the bindings running here, then release their leases.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for binding_id, token in list(self._tokens.items()):
            await self._stopped(binding_id, reason="stopping")
            try:
                await self._leases.release(lease_name(binding_id), token)
            except Exception:  # the lease lapses with this node's row instead
                log.exception("could not release the lease", binding=binding_id)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_pass()
            except SessionsError as exc:  # the next pass tries again; a ttl bounds the trust
                log.warning("channel lease pass failed", error=repr(exc))
                await self._drop_unconfirmed()
            except Exception:
                log.exception("channel lease pass failed")
                await self._drop_unconfirmed()
            await asyncio.sleep(self._interval_s)

    async def run_pass(self) -> None:
        """One pass: confirm or give up the leases of the bindings running here (and stop those
        no one could confirm for a ttl), then take free ones and start their bindings (a start
        may wait for the replies left in flight, so it comes after the confirmations), then note
        who holds what. Raises what the database raises."""
        for binding_id in [b for b in self._ids if b in self._tokens]:
            if self._closed:
                return
            await self._confirm(binding_id)
        await self._drop_unconfirmed()
        for binding_id in [b for b in self._ids if b not in self._tokens]:
            if self._closed:
                return
            await self._try_acquire(binding_id)
        self._holders = await self._leases.holders()

    async def _confirm(self, binding_id: str) -> None:
        asked_at = self._clock()
        if await self._leases.held(lease_name(binding_id), self._tokens[binding_id]):
            self._confirmed[binding_id] = asked_at
            return
        log.warning("channel lease lost; disconnecting", binding=binding_id, node=self.node_id)
        await self._stopped(binding_id, reason="lease lost")

    async def _try_acquire(self, binding_id: str) -> None:
        asked_at = self._clock()
        name = lease_name(binding_id)
        token = await self._leases.acquire(name)
        if token is None:
            return
        self._tokens[binding_id] = token
        self._confirmed[binding_id] = asked_at
        log.info("channel lease acquired", binding=binding_id, node=self.node_id, token=token)
        try:
            await self._start(binding_id)
        except Exception:
            log.exception("binding did not start; giving its lease back", binding=binding_id)
            del self._tokens[binding_id]
            self._confirmed.pop(binding_id, None)
            await self._leases.release(name, token)

    async def _drop_unconfirmed(self) -> None:
        """Stop the bindings whose lease nobody could confirm for a whole ttl."""
        now = self._clock()
        for binding_id in [bid for bid, at in self._confirmed.items() if now - at >= self._ttl_s]:
            log.warning("channel lease unconfirmed for a ttl; disconnecting", binding=binding_id)
            await self._stopped(binding_id, reason="lease unconfirmed")

    async def _stopped(self, binding_id: str, *, reason: str) -> None:
        self._tokens.pop(binding_id, None)
        self._confirmed.pop(binding_id, None)
        try:
            await self._stop(binding_id)
        except Exception:
            log.exception("binding did not stop cleanly", binding=binding_id, reason=reason)
