"""Discord's Gateway protocol as a sans-I/O state machine.

The object lives as long as the binding and spans its successive WebSocket connections (the
session id and sequence number outlive any one of them). The shell feeds it what happens:

- `start(gateway_url)` once, then, for each connection, `next_connection()` says where and when to
  connect (None: stop for good), `connection_made(now)`, then `receive(text, now)` for every frame
  and `tick(now)` whenever `next_deadline()` passes, and finally `connection_lost(code)`;
- after each call the shell sends `data_to_send()` and, if `close_requested()` is set, closes the
  socket with that code.

Life of a connection: HELLO gives the heartbeat interval; the first heartbeat goes out after
`interval * jitter` and then every interval, carrying the last sequence number. We IDENTIFY (a new
session) or RESUME (session id + seq) right after HELLO, and are `ready` only on READY / RESUMED.
A heartbeat that is still unacknowledged when the next one is due means a zombie connection: we
close with a non-1000 code (so the session stays resumable) and resume at `resume_gateway_url`.
RECONNECT (op 7) and INVALID_SESSION with `d: true` also resume; INVALID_SESSION with `d: false`
forgets the session and identifies again after a random 1-5 s. Close codes that forbid
reconnecting (bad token, bad intents...) stop the machine with `fatal` set.
"""

from __future__ import annotations

import enum
import json
import platform
import random
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from bindings.errors import FatalCloseError, GatewayProtocolError
from bindings.state import ConnectionState, StateMachine

GATEWAY_VERSION = "10"


class Op(enum.IntEnum):
    DISPATCH = 0
    HEARTBEAT = 1
    IDENTIFY = 2
    PRESENCE_UPDATE = 3
    RESUME = 6
    RECONNECT = 7
    INVALID_SESSION = 9
    HELLO = 10
    HEARTBEAT_ACK = 11


FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})
"""Authentication failed, invalid shard, sharding required, invalid API version, invalid or
disallowed intents: reconnecting cannot help."""
NEW_SESSION_CLOSE_CODES = frozenset({4007, 4009})
"""Invalid seq, session timed out: reconnect, but identify instead of resuming."""
RESUMABLE_CLOSE = 4000
"""The code we close with when we intend to resume (anything but 1000/1001 keeps the session)."""


@dataclass(frozen=True, kw_only=True)
class GatewayTimings:
    """Timers of the protocol. The defaults are Discord's; tests shrink them."""

    invalid_session_delay: tuple[float, float] = (1.0, 5.0)
    reconnect_initial_s: float = 1.0
    reconnect_max_s: float = 60.0
    hello_timeout_s: float = 20.0
    close_timeout_s: float = 5.0


@dataclass(frozen=True, kw_only=True)
class Ready:
    session_id: str
    user_id: str
    resume_url: str
    application_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Resumed:
    seq: int | None


@dataclass(frozen=True, kw_only=True)
class Dispatch:
    name: str
    seq: int | None
    data: Any


GatewayEvent: TypeAlias = Ready | Resumed | Dispatch


@dataclass(frozen=True, kw_only=True)
class CloseRequest:
    code: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class ConnectPlan:
    url: str
    delay_s: float
    resume: bool


def connect_url(base: str) -> str:
    """`base` with `v=10&encoding=json` set in its query."""
    parts = urlsplit(base)
    query = dict(parse_qsl(parts.query))
    query.update({"v": GATEWAY_VERSION, "encoding": "json"})
    path = parts.path or "/"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


class DiscordGatewayProtocol:
    """See the module docstring. Raises `GatewayProtocolError` for frames Discord never sends
    (not JSON, no op code) and `StateTransitionError` for frames out of order (READY twice)."""

    def __init__(
        self,
        *,
        token: str,
        intents: int,
        timings: GatewayTimings | None = None,
        rng: random.Random | None = None,
        properties: dict[str, str] | None = None,
    ) -> None:
        self._token = token
        self._intents = intents
        self._timings = timings or GatewayTimings()
        self._rng = rng or random.Random()
        self._properties = properties or {
            "os": platform.system().lower() or "linux",
            "browser": "agent-gateway",
            "device": "agent-gateway",
        }
        self.machine = StateMachine()
        self.session_id: str | None = None
        self.seq: int | None = None
        self.resume_url: str | None = None
        self.gateway_url: str | None = None
        self.fatal: FatalCloseError | None = None
        self._plan: ConnectPlan | None = None
        self._failures = 0
        self._reset_connection()

    @property
    def state(self) -> ConnectionState:
        return self.machine.state

    def _reset_connection(self) -> None:
        self._outgoing: list[str] = []
        self._close: CloseRequest | None = None
        self._after_close: ConnectPlan | None = None
        self._hello_deadline: float | None = None
        self._interval: float | None = None
        self._next_heartbeat: float | None = None
        self._awaiting_ack = False
        self._reached_ready = False
        self.heartbeats_sent = 0
        self.acks_received = 0

    # -- lifecycle driven by the shell -------------------------------------------------------

    def start(self, gateway_url: str) -> None:
        """Begin a new session at `gateway_url` (from `GET /gateway/bot`)."""
        self.machine.transition(ConnectionState.CONNECTING, expected=(ConnectionState.CLOSED,))
        self.gateway_url = gateway_url
        self.fatal = None
        self._plan = ConnectPlan(url=connect_url(gateway_url), delay_s=0.0, resume=False)

    def stop(self) -> None:
        """Stop for good: no further connection is planned."""
        self._plan = None
        if self.state is not ConnectionState.CLOSED:
            self.machine.transition(ConnectionState.CLOSED)

    def next_connection(self) -> ConnectPlan | None:
        """Where and when to connect next; None once the machine is closed."""
        return self._plan if self.state is not ConnectionState.CLOSED else None

    def connection_made(self, now: float) -> None:
        self._reset_connection()
        self._hello_deadline = now + self._timings.hello_timeout_s

    def connect_failed(self) -> None:
        """The connection could not be opened: try the same plan again, later."""
        self._failures += 1
        if self._plan is not None:
            self._plan = ConnectPlan(url=self._plan.url, delay_s=self._backoff(), resume=self._plan.resume)

    def connection_lost(self, code: int | None, reason: str = "") -> None:
        """The socket closed (`code` None: no close frame). Plans the next connection."""
        if not self._reached_ready:
            self._failures += 1
        if self.state is ConnectionState.CLOSED:
            return
        if self._after_close is not None:
            plan = self._after_close
            backoff = self._backoff()
            if backoff > plan.delay_s:
                plan = ConnectPlan(url=plan.url, delay_s=backoff, resume=plan.resume)
        elif code in FATAL_CLOSE_CODES:
            self.fatal = FatalCloseError(code or 0, reason)
            self.stop()
            return
        elif code in NEW_SESSION_CLOSE_CODES or self.session_id is None:
            plan = self._identify_plan(self._backoff())
        else:
            plan = self._resume_plan(self._backoff())
        self._enter_plan(plan)

    # -- frames ----------------------------------------------------------------------------

    def receive(self, text: str | bytes, now: float) -> list[GatewayEvent]:
        """Take one frame; returns the events it carries (at most one)."""
        try:
            payload = json.loads(text)
            op = Op(int(payload["op"]))
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            raise GatewayProtocolError(f"not a gateway payload: {str(text)[:120]!r}") from exc
        data = payload.get("d")
        if op is Op.HELLO:
            self._on_hello(data, now)
        elif op is Op.HEARTBEAT_ACK:
            self._awaiting_ack = False
            self.acks_received += 1
        elif op is Op.HEARTBEAT:
            self._send_heartbeat(now, reschedule=False)
        elif op is Op.RECONNECT:
            self._request_close("reconnect requested", self._resume_plan(0.0))
        elif op is Op.INVALID_SESSION:
            self._on_invalid_session(bool(data))
        elif op is Op.DISPATCH:
            return self._on_dispatch(payload)
        return []

    def tick(self, now: float) -> None:
        """Run the timers that are due: the hello timeout, heartbeats, zombie detection."""
        if self._close is not None:
            return
        if self._hello_deadline is not None and now >= self._hello_deadline:
            self._request_close("no HELLO received", self._same_again_plan())
            return
        if self._next_heartbeat is not None and now >= self._next_heartbeat:
            if self._awaiting_ack:
                self._request_close("heartbeat not acknowledged (zombie connection)", self._same_again_plan())
                return
            self._send_heartbeat(now, reschedule=True)

    def next_deadline(self) -> float | None:
        if self._close is not None:
            return None
        times = [t for t in (self._hello_deadline, self._next_heartbeat) if t is not None]
        return min(times) if times else None

    def data_to_send(self) -> list[str]:
        out, self._outgoing = self._outgoing, []
        return out

    def close_requested(self) -> CloseRequest | None:
        return self._close

    # -- internals -------------------------------------------------------------------------

    def _on_hello(self, data: Any, now: float) -> None:
        if self._hello_deadline is None:
            raise GatewayProtocolError("HELLO received twice on one connection")
        try:
            self._interval = float(data["heartbeat_interval"]) / 1000.0
        except (KeyError, TypeError, ValueError) as exc:
            raise GatewayProtocolError("HELLO without heartbeat_interval") from exc
        self._hello_deadline = None
        self._next_heartbeat = now + self._interval * self._rng.random()
        if self.state is ConnectionState.RESUMING and self.session_id is not None:
            self._send(
                {"op": Op.RESUME, "d": {"token": self._token, "session_id": self.session_id, "seq": self.seq}}
            )
        else:
            if self.state is ConnectionState.RESUMING:
                self.machine.transition(ConnectionState.CONNECTING)
            self._send(
                {
                    "op": Op.IDENTIFY,
                    "d": {"token": self._token, "intents": self._intents, "properties": self._properties},
                }
            )

    def _on_dispatch(self, payload: dict[str, Any]) -> list[GatewayEvent]:
        seq = payload.get("s")
        if isinstance(seq, int):
            self.seq = seq
        name = str(payload.get("t") or "")
        data = payload.get("d")
        if name == "READY":
            if not isinstance(data, dict) or "session_id" not in data:
                raise GatewayProtocolError("READY without a session id")
            user = data.get("user")
            if not isinstance(user, dict) or "id" not in user:
                raise GatewayProtocolError("READY without a user id")
            self.machine.transition(ConnectionState.READY, expected=(ConnectionState.CONNECTING,))
            self.session_id = str(data["session_id"])
            self.resume_url = str(data.get("resume_gateway_url") or self.gateway_url or "")
            self._connected()
            app = data.get("application")
            return [
                Ready(
                    session_id=self.session_id,
                    user_id=str(user["id"]),
                    resume_url=self.resume_url,
                    application_id=str(app["id"]) if isinstance(app, dict) and "id" in app else None,
                )
            ]
        if name == "RESUMED":
            self.machine.transition(ConnectionState.READY, expected=(ConnectionState.RESUMING,))
            self._connected()
            return [Resumed(seq=self.seq)]
        return [Dispatch(name=name, seq=seq if isinstance(seq, int) else None, data=data)]

    def _connected(self) -> None:
        self._reached_ready = True
        self._failures = 0

    def _on_invalid_session(self, resumable: bool) -> None:
        if resumable and self.session_id is not None:
            self._request_close("invalid session (resumable)", self._resume_plan(0.0))
            return
        low, high = self._timings.invalid_session_delay
        self.session_id = None
        self.seq = None
        self._request_close("invalid session", self._identify_plan(self._rng.uniform(low, high)))

    def _send_heartbeat(self, now: float, *, reschedule: bool) -> None:
        self._send({"op": Op.HEARTBEAT, "d": self.seq})
        self.heartbeats_sent += 1
        if reschedule and self._interval is not None:
            self._awaiting_ack = True
            self._next_heartbeat = now + self._interval

    def _send(self, payload: dict[str, Any]) -> None:
        self._outgoing.append(json.dumps(payload, separators=(",", ":")))

    def _request_close(self, reason: str, plan: ConnectPlan) -> None:
        self._close = CloseRequest(code=RESUMABLE_CLOSE, reason=reason)
        self._after_close = plan

    def _same_again_plan(self) -> ConnectPlan:
        return self._resume_plan(0.0) if self.session_id is not None else self._identify_plan(self._backoff())

    def _resume_plan(self, delay: float) -> ConnectPlan:
        if self.session_id is None:
            return self._identify_plan(delay)
        return ConnectPlan(
            url=connect_url(self.resume_url or self.gateway_url or ""), delay_s=delay, resume=True
        )

    def _identify_plan(self, delay: float) -> ConnectPlan:
        return ConnectPlan(url=connect_url(self.gateway_url or ""), delay_s=delay, resume=False)

    def _enter_plan(self, plan: ConnectPlan) -> None:
        if not plan.resume:
            self.session_id = None
            self.seq = None
        self._plan = plan
        target = ConnectionState.RESUMING if plan.resume else ConnectionState.CONNECTING
        self.machine.transition(target)

    def _backoff(self) -> float:
        if self._failures <= 0:
            return 0.0
        base = self._timings.reconnect_initial_s * 2 ** (self._failures - 1)
        return float(min(base, self._timings.reconnect_max_s) * (0.5 + self._rng.random() / 2))
