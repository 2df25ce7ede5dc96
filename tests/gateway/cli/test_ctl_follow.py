"""The sans-I/O halves of `gatewayctl sessions tail` / `send`: which frames to show after a
resume, and which events belong to the run an input ended up in."""

from __future__ import annotations

from typing import Any

from gateway.cli.ctl_follow import ResumeCursor, RunFollower, Verdict


def native(seq: int, name: str = "message.delta", session: str = "s1", **payload: Any) -> dict[str, Any]:
    return {
        "type": "event",
        "event": f"session.{name}",
        "payload": {"sessionId": session, "sessionSeq": seq, **payload},
    }


def test_cursor_shows_each_event_once_in_order() -> None:
    cursor = ResumeCursor(last_seq=3)
    cursor.subscribed({"sessionId": "s1", "lastSeq": 9})
    assert cursor.last_seq == 3  # an explicit starting point wins over the answer's lastSeq
    assert [cursor.verdict(native(seq)) for seq in (4, 5, 5, 3)] == [
        Verdict.SHOW,
        Verdict.SHOW,
        Verdict.SKIP,
        Verdict.SKIP,
    ]
    assert cursor.verdict(native(6, session="other")) is Verdict.SKIP
    assert cursor.verdict({"type": "event", "event": "tick", "payload": {"ts": 1}}) is Verdict.SKIP
    assert cursor.verdict({"type": "event", "event": "chat", "payload": {"sessionId": "s1"}}) is Verdict.SKIP
    assert cursor.last_seq == 5


def test_cursor_without_a_start_begins_after_the_answer() -> None:
    cursor = ResumeCursor()
    cursor.subscribed({"sessionId": "s1", "lastSeq": 7})
    assert cursor.verdict(native(8)) is Verdict.SHOW


def test_a_gap_asks_for_one_resubscribe_and_the_replay_fills_it() -> None:
    cursor = ResumeCursor(session_id="s1", last_seq=10)
    assert cursor.verdict(native(13)) is Verdict.GAP
    # Frames still queued from before the resubscribe are dropped, not reported again.
    assert cursor.verdict(native(14)) is Verdict.SKIP
    assert [cursor.verdict(native(seq)) for seq in (11, 12, 13, 14)] == [Verdict.SHOW] * 4
    assert cursor.verdict(native(16)) is Verdict.GAP


def test_a_snapshot_stands_for_the_pruned_events() -> None:
    cursor = ResumeCursor(session_id="s1", last_seq=2)
    assert cursor.verdict(native(40, "snapshot", messages=[], partial=None)) is Verdict.SHOW
    assert cursor.verdict(native(41)) is Verdict.SHOW
    assert cursor.verdict(native(30)) is Verdict.SKIP


def completed(run: str, role: str, text: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    message = {"role": role, "content": [{"type": "text", "text": text}], **extra}
    return "session.message.completed", {"runId": run, "message": message}


def test_follower_keeps_to_its_own_run() -> None:
    follower = RunFollower("k1")
    assert not follower.mine(*completed("other", "assistant", "not ours"))
    assert follower.mine(*completed("k1", "assistant", "echo: hi"))
    assert follower.mine("session.agent.finished", {"runId": "k1", "terminationReason": "no_tool_calls"})
    outcome = follower.outcome()
    assert outcome["status"] == "ok" and outcome["text"] == "echo: hi" and outcome["runId"] == "k1"


def test_a_steered_input_follows_the_run_it_joined() -> None:
    follower = RunFollower("k2")
    assert not follower.mine(*completed("r1", "assistant", "reply to the earlier message"))
    assert follower.mine(*completed("r1", "user", "steer", idempotencyKey="k2"))
    assert follower.mine(*completed("r1", "assistant", "echo: steer"))
    follower.mine("session.agent.finished", {"runId": "r1", "terminationReason": "aborted"})
    assert follower.outcome()["status"] == "aborted"
    assert follower.outcome()["text"] == "echo: steer"


def test_a_merged_input_is_found_by_its_merged_keys() -> None:
    follower = RunFollower("k3")
    assert follower.mine(*completed("r9", "user", "a\n\nb", idempotencyKey="k0", mergedKeys=["k0", "k3"]))
    follower.mine(
        "session.agent.finished", {"runId": "r9", "terminationReason": "error", "errorMessage": "x"}
    )
    outcome = follower.outcome()
    assert outcome["status"] == "error" and outcome["errorMessage"] == "x"


def test_the_status_follows_the_termination_reason_as_the_gateway_reports_it() -> None:
    # The same outcome `agent.wait` answers: time limits and a crash count as aborted, not errors.
    expected = {
        "max_duration": "aborted",
        "idle_timeout": "aborted",
        "gateway_shutdown": "aborted",
        "interrupted": "aborted",
        "error": "error",
        "something-new": "error",
    }
    for reason, status in expected.items():
        follower = RunFollower("k4")
        follower.mine("session.agent.finished", {"runId": "k4", "terminationReason": reason})
        assert follower.outcome()["status"] == status, reason


def test_caught_up_once_every_event_to_a_seq_was_shown() -> None:
    cursor = ResumeCursor()
    assert not cursor.caught_up(0)  # nothing known before the first subscribe answer
    cursor.subscribed({"sessionId": "s1", "lastSeq": 4})
    assert cursor.caught_up(4) and not cursor.caught_up(6)
    cursor.verdict(native(5))
    assert not cursor.caught_up(6)
    cursor.verdict(native(6))
    assert cursor.caught_up(6)
