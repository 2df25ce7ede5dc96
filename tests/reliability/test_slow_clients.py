"""100 clients on one streaming session: most keep up, some stop reading, some vanish without a
close (TCP abort). The run streams a tool's output (an update of ~45 KB every 0.1 s) for 7 s, then
is aborted (the faux model would echo the 45 KB output word by word otherwise). Those who keep up
must see every event, in order and on time; the ones that stopped reading must be closed with
1008 "slow consumer" (after `max_buffered_bytes` of queued frames plus whatever the kernel's socket
buffers held: Linux lets a loopback send buffer grow to ~4 MB, hence the volume), and the vanished
ones must be gone from the daemon. None of it may slow the session down.

The healthy clients are `bench._wire.WireClient`s (a few microseconds per frame), so that the test
process keeps up with 80 connections and latency measures the daemon, not the test.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import websockets
from websockets.asyncio.client import ClientConnection

from bench._report import percentile
from bench._wire import WireClient
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import connected, event_log, log_records, tool_message, wait_until

HEALTHY, STUCK, VANISHING = 80, 10, 10
MAX_BUFFERED = 256 * 1024  # room for a few 45 KB updates published in one journal batch
KEY = "agent:main:fanout"
# A 45 KB line ten times a second: each tool update carries one (twice, for clients with the
# `tool-events` cap), so a stuck client's backlog passes 4 MB in about five seconds.
COMMAND = "for i in $(seq 200); do head -c 45000 /dev/zero | tr '\\0' x; echo; sleep 0.1; done"
STREAM_S = 7.0
NATIVE_PREFIX = b'{"type":"event","event":"session.'


@dataclass
class Watcher:
    """A healthy client: records connection seqs, native sessionSeqs and each event's latency
    (receive time minus the `ts` the daemon stamped when the event was created)."""

    client: WireClient
    seqs: list[int] = field(default_factory=list)
    session_seqs: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    last_name: str = ""

    def on_event(self, payload: bytes, _now: float) -> None:
        received = time.time()
        self.seqs.append(int(payload[payload.rfind(b'"seq":') + 6 : -1]))
        if payload.startswith(NATIVE_PREFIX):
            frame = json.loads(payload)
            body = frame["payload"]
            if body.get("sessionSeq") is not None:
                self.session_seqs.append(body["sessionSeq"])
                self.latencies.append(received - body["ts"] / 1000)
                self.last_name = frame["event"]


async def _stuck_client(daemon: Daemon) -> tuple[ClientConnection, str]:
    """A client that subscribes, then never reads again: websockets stops reading the socket once
    four frames are queued, and the tiny receive buffer makes its window close at once."""
    sock = socket.create_connection(("127.0.0.1", daemon.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ws = await websockets.connect(daemon.url, sock=sock, max_queue=4, compression=None, ping_interval=None)
    json.loads(await ws.recv())
    params: dict[str, Any] = {
        "minProtocol": 4,
        "maxProtocol": 4,
        "client": {"id": "stuck", "version": "1", "platform": "linux", "mode": "cli"},
        "role": "operator",
        "scopes": ["operator.read"],
        "caps": ["session-scoped-events", "tool-events"],
        "auth": {"token": daemon.token},
    }
    await ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": params}))
    hello = json.loads(await ws.recv())
    assert hello["ok"], hello
    await ws.send(
        json.dumps({"type": "req", "id": "s", "method": "sessions.events.subscribe", "params": {"key": KEY}})
    )
    assert json.loads(await ws.recv())["ok"]
    return ws, hello["payload"]["server"]["connId"]


async def _read_until_closed(ws: ClientConnection, timeout: float) -> tuple[int | None, str]:
    try:
        async with asyncio.timeout(timeout):
            while True:
                await ws.recv()
    except websockets.ConnectionClosed as exc:
        return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (None, "")
    except TimeoutError:
        return (-1, "still open")


def _daemon_side(port: int, peers: set[int]) -> list[Any]:
    """The daemon's TCP sockets (in any state, orphans included) connected to `peers`."""
    return [
        c
        for c in psutil.net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port in peers
    ]


async def _watcher(daemon: Daemon) -> Watcher:
    client = await WireClient.open("127.0.0.1", daemon.port)
    await client.gateway_connect(daemon.token)
    await client.request("sessions.events.subscribe", {"key": KEY})
    watcher = Watcher(client)
    client.on_event = watcher.on_event
    return watcher


async def test_slow_and_vanishing_clients_never_hold_up_the_ones_that_keep_up(gateway_home: Path) -> None:
    daemon = start_daemon(
        gateway_home,
        config=f"[gateway]\nmax_buffered_bytes = {MAX_BUFFERED}\n",
        env={"GATEWAY_FAUX_PACE_MS": "5"},
    )
    watchers: list[Watcher] = []
    vanishing: list[WireClient] = []
    stuck: list[tuple[ClientConnection, str]] = []
    try:
        async with connected(daemon) as control:
            await control.call("sessions.create", {"key": KEY})
            watchers = list(await asyncio.gather(*(_watcher(daemon) for _ in range(HEALTHY))))
            vanishing = [
                w.client for w in await asyncio.gather(*(_watcher(daemon) for _ in range(VANISHING)))
            ]
            stuck = [await _stuck_client(daemon) for _ in range(STUCK)]
            assert (await control.call("status"))["connections"] == HEALTHY + VANISHING + STUCK + 1

            started = time.monotonic()
            await control.call(
                "chat.send",
                {
                    "sessionKey": KEY,
                    "message": tool_message("bash", {"command": COMMAND}),
                    "idempotencyKey": "fan",
                },
            )
            await asyncio.sleep(1.0)
            for client in vanishing:
                assert client.transport is not None
                client.transport.abort()
            await asyncio.sleep(STREAM_S - 1.0)
            aborted = await control.call("chat.abort", {"sessionKey": KEY})
            assert aborted["runIds"] == ["fan"], aborted
            outcome = await control.call("agent.wait", {"runId": "fan", "timeoutMs": 30_000}, timeout=40)
            elapsed = time.monotonic() - started
            assert outcome["terminationReason"] == "aborted", outcome

            log = await event_log(daemon, KEY)
            expected = [e["sessionSeq"] for e in log]
            await wait_until(
                lambda: all(w.session_seqs[-1:] == expected[-1:] for w in watchers),
                timeout=20,
                what="watchers",
            )
            for n, watcher in enumerate(watchers):
                assert watcher.session_seqs == expected, f"watcher {n} lost or reordered session events"
                assert watcher.seqs == list(range(1, len(watcher.seqs) + 1)), (
                    f"watcher {n} had a dropped frame"
                )
            latencies = [lat for w in watchers for lat in w.latencies]
            p99, worst = percentile(latencies, 0.99), max(latencies)
            print(
                f"fan-out latency over {len(latencies)} deliveries: "
                f"p99 {p99 * 1e3:.0f} ms, max {worst * 1e3:.0f} ms"
            )
            assert p99 < 1.5 and worst < 4.0, (p99, worst)
            # The stuck and vanished clients did not hold the run up: it stopped soon after the abort.
            assert elapsed < STREAM_S + 5, elapsed

            # The daemon dropped the stuck clients as slow consumers, and forgot the vanished.
            slow = {
                r.get("conn_id") for r in log_records(daemon) if r.get("event") == "closing a slow consumer"
            }
            assert {conn for _, conn in stuck} <= slow, "a client that stopped reading was not closed as slow"
            status = await control.call("status")
            deadline = time.monotonic() + 10
            while status["connections"] != HEALTHY + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                status = await control.call("status")
            assert status["connections"] == HEALTHY + 1, status["connections"]
            # Dropped for good: nothing of them is left on the daemon's side, not even a socket
            # the kernel keeps flushing megabytes into, and they see their connection end.
            ports = {ws.transport.get_extra_info("sockname")[1] for ws, _ in stuck}
            await wait_until(
                lambda: not _daemon_side(daemon.port, ports),
                timeout=10,
                what="the stuck sockets to be released",
            )
            for ws, conn in stuck:
                code, reason = await _read_until_closed(ws, timeout=10)
                assert code != -1, f"connection {conn} is still open"
                if code is not None:  # the close frame made it before the socket was reset
                    assert (code, reason) == (1008, "slow consumer"), (conn, code, reason)
    finally:
        for watcher in watchers:
            watcher.client.close()
        for client in vanishing:
            client.close()
        for ws, _ in stuck:
            ws.transport.abort()
        daemon.stop()
