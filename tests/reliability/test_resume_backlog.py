"""Resuming from far back: a client that comes back after a long absence asks for a backlog larger
than its connection's send buffer (`max_buffered_bytes`). The replay must arrive whole and in
order, paced by how fast the client reads, without the daemon closing the connection as a slow
consumer and without dropping replayed events (they are the exact replay the protocol promises)."""

from __future__ import annotations

from pathlib import Path

from tests.daemon import start_daemon
from tests.reliability._support import Follower, assert_contiguous, connected, event_log, tool_message

MAX_BUFFERED = 64 * 1024
# Twenty ~40 KB lines 0.1 s apart: about twenty tool updates of ~50 KB each, ~1 MB of log.
COMMAND = "for i in $(seq 20); do head -c 40000 /dev/zero | tr '\\0' y; echo; sleep 0.1; done"


async def test_resume_with_a_backlog_larger_than_the_send_buffer_arrives_whole(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home, config=f"[gateway]\nmax_buffered_bytes = {MAX_BUFFERED}\n")
    key = "agent:main:backlog"
    try:
        async with connected(daemon) as writer:
            await writer.call(
                "chat.send",
                {
                    "sessionKey": key,
                    "message": tool_message("bash", {"command": COMMAND}),
                    "idempotencyKey": "b",
                },
            )
            assert (await writer.call("agent.wait", {"runId": "b", "timeoutMs": 30_000}))["status"] == "ok"
            # Live: a third of the log arrives while the client replays the rest.
            await writer.call("chat.send", {"sessionKey": key, "message": "!long 40", "idempotencyKey": "c"})
            async with connected(daemon) as reader:
                answer = await reader.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
                follower = Follower(key, session_id=answer["sessionId"])
                assert (await writer.call("agent.wait", {"runId": "c", "timeoutMs": 30_000}))[
                    "status"
                ] == "ok"
                last = (await writer.call("sessions.describe", {"key": key}))["lastSeq"]
                while follower.last_seq < last:
                    frame = await reader.next_event(timeout=15)
                    assert frame is not None, (
                        f"closed {reader.close_code} {reader.close_reason} at {follower.last_seq}"
                    )
                    follower.feed([frame])
                assert reader.gaps == 0, f"{reader.gaps} frames were dropped from the replay"
                assert reader.close_code is None
        log = await event_log(daemon, key)
        assert_contiguous(follower.events, what="the replay")
        assert [e["sessionSeq"] for e in follower.events] == [e["sessionSeq"] for e in log]
        assert sum(len(str(e)) for e in log) > 10 * MAX_BUFFERED, "the backlog was not large enough"
    finally:
        daemon.stop()
