"""Fan-out under back-pressure: clients that stop reading do not stall a session or the clients
that keep up, and are dropped with 1008 "slow consumer"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import websockets

from gateway.client import GatewayClient
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import Raw, connect_params, is_run_end, wait_for

# Small enough that a stuck client passes it quickly, large enough for the bursts a group commit
# of the event log hands to clients that keep up. OpenClaw deltas unpaced: each carries the whole
# reply so far, which fills a stuck client's socket fast.
CONFIG = "[gateway]\nmax_buffered_bytes = 524288\ncompat_delta_interval_ms = 0\n"
WATCHED = "agent:main:watched"
HEAVY = "agent:main:heavy"


async def stuck_client(daemon: Daemon) -> Raw:
    """A client that will stop reading: a small receive buffer, and its library stops reading
    the socket once one frame is waiting. Without `session-scoped-events` it gets every session's
    `agent`/`chat` stream, and it also follows the watched session natively."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", daemon.port))
    raw = await Raw.open(daemon.url, sock=sock, max_queue=1)
    assert (await raw.handshake(connect_params(daemon.token, caps=())))["ok"]
    assert (await raw.request("sessions.events.subscribe", {"key": WATCHED}))["ok"]
    return raw


async def status(client: GatewayClient) -> dict[str, Any]:
    answer: dict[str, Any] = await client.call("status")
    return answer


async def test_a_stuck_client_neither_stalls_others_nor_stays(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home, config=CONFIG)
    try:
        async with contextlib.AsyncExitStack() as stack:
            writer = await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
            await writer.call("sessions.create", {"key": WATCHED})
            readers = [
                await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
                for _ in range(4)
            ]
            for reader in readers:
                await reader.call("sessions.events.subscribe", {"key": WATCHED})
            resumed_later = await stuck_client(daemon)
            stack.callback(resumed_later.ws.transport.abort)
            never_reads = await stuck_client(daemon)
            stack.callback(never_reads.ws.transport.abort)
            assert (await status(writer))["connections"] == 7

            started = time.monotonic()
            await writer.call(
                "chat.send", {"sessionKey": WATCHED, "message": "!long 300", "idempotencyKey": "w"}
            )
            # Large cumulative `agent`/`chat` frames of another session fill the stuck clients' sockets.
            wide = " ".join(["x" * 100] * 300)
            await writer.call("chat.send", {"sessionKey": HEAVY, "message": wide, "idempotencyKey": "h"})
            seen = await asyncio.gather(*(_until_end(reader) for reader in readers))
            elapsed = time.monotonic() - started

            # The session ran (a fan-out that waited for the stuck clients would stall it until
            # they are dropped) and every reader saw every event, in order, without gaps.
            assert elapsed < 15, elapsed
            assert (await writer.call("agent.wait", {"runId": "h", "timeoutMs": 10_000}))["status"] == "ok"
            sequences = [[(e["event"], e["payload"].get("sessionSeq")) for e in events] for events in seen]
            assert all(sequence == sequences[0] for sequence in sequences)
            session_seqs = [s for name, s in sequences[0] if name.startswith("session.")]
            assert session_seqs == list(range(1, len(session_seqs) + 1))
            assert all(reader.gaps == 0 and reader.dropped == 0 for reader in readers)
            text = "".join(e["payload"]["delta"] for e in seen[0] if e["event"] == "session.message.delta")
            assert text == " ".join(f"w{n}" for n in range(1, 301))

            # Both stuck clients are being closed as slow consumers.
            deadline = time.monotonic() + 10
            while (await status(writer))["slowConsumersClosed"] < 2:
                assert time.monotonic() < deadline, "the stuck clients were not closed"
                await asyncio.sleep(0.05)

            # The one that reads again gets what was already on its way, in order (deltas dropped
            # for it leave visible gaps), then 1008.
            seqs = []
            try:
                async with asyncio.timeout(10):
                    while True:
                        frame = json.loads(await resumed_later.ws.recv())
                        if "seq" in frame:
                            seqs.append(frame["seq"])
            except websockets.exceptions.ConnectionClosed as closed:
                assert closed.rcvd is not None, "dropped without a close frame"
                assert (closed.rcvd.code, closed.rcvd.reason) == (1008, "slow consumer")
            assert seqs[0] == 1 and seqs == sorted(set(seqs))

            # The one that never reads is dropped anyway; the readers are still connected.
            deadline = time.monotonic() + 10
            while (await status(writer))["connections"] != 5:
                assert time.monotonic() < deadline, "the client that never reads was not dropped"
                await asyncio.sleep(0.1)
            for reader in readers:
                assert (await reader.call("health"))["ok"] is True
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def _until_end(reader: GatewayClient) -> list[dict[str, Any]]:
    return await _until_end_of(reader, "w")


async def test_connections_to_the_daemon_use_the_direct_writer(gateway_home: Path) -> None:
    """On the pinned uvicorn the fan-out fast path is engaged: frames reach the sockets through
    the direct writer, not one ASGI `send` at a time."""
    daemon = start_daemon(gateway_home)
    try:
        async with (
            GatewayClient(daemon.url, token=daemon.token) as reader,
            GatewayClient(daemon.url, token=daemon.token) as writer,
        ):
            await reader.call("sessions.events.subscribe", {"key": WATCHED, "afterSeq": 0})
            await writer.call(
                "chat.send", {"sessionKey": WATCHED, "message": "!long 40", "idempotencyKey": "d"}
            )
            events = await _until_end_of(reader, "d")
            fan_out = (await status(reader))["fanOut"]
            assert fan_out["directWriteConnections"] == 2
            # Every frame is written directly while the socket takes data without waiting (this
            # run's few KB never fill it); a paused socket would send the rest through ASGI.
            assert fan_out["framesWrittenDirect"] > 0
            assert fan_out["framesWrittenDirect"] + fan_out["framesWrittenBySend"] >= len(events)
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def _until_end_of(reader: GatewayClient, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    await wait_for(reader, is_run_end(run_id), into=events, timeout=20)
    return events
