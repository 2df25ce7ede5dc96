"""Recovery after a crash: crafted crash states (unit), and a real gateway process killed with
SIGKILL mid-run at seeded random points, then restarted on the same database."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_core import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from sessions.journal import Journal
from sessions.recovery import INTERRUPTED_TEXT, ORPHANED_TOOL_TEXT, recover
from sessions.store import NewEntry, NewEvent, Store, default_url
from tests.sessions.manager_support import HarnessFactory, Recorder, echo_tool, harnesses, tools_factory

__all__ = ["harnesses"]

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("recovery_child.py")


def _user(text: str, key: str) -> dict[str, Any]:
    return {**UserMessage(content=[TextContent(text=text)]).dump(), "idempotencyKey": key}


def _assistant(*calls: str) -> dict[str, Any]:
    content: list[Any] = [TextContent(text="calling")]
    content += [ToolCall(id=c, name="echo", arguments={"text": c}) for c in calls]
    return AssistantMessage(
        content=content, api="faux", provider="faux", model="echo", stop_reason="toolUse"
    ).dump()


def _result(call_id: str) -> dict[str, Any]:
    return ToolResultMessage(tool_call_id=call_id, tool_name="echo", content=[TextContent(text="ok")]).dump()


async def _crash_state(store: Store, *, streaming: bool, status: str = "running") -> str:
    """A session whose run `R` was cut off: while a reply streamed (`streaming`), or while the
    second of two tool calls ran."""
    session = await store.tree.create_session(agent_id="main", key="agent:main:main")
    await store.runs.create("R", session.id)
    calls = ("c1",) if streaming else ("c1", "c2")
    messages = [("u1", _user("do it", "k1")), ("a1", _assistant(*calls)), ("r1", _result("c1"))]
    events = [NewEvent(1, "status.changed", {"status": "running"}, run_id="R")]
    for entry_id, payload in messages:
        events.append(
            NewEvent(len(events) + 1, "message.completed", {"messageId": entry_id, "message": payload}, "R")
        )
    if streaming:
        events.append(
            NewEvent(len(events) + 1, "message.started", {"messageId": "m2", "role": "assistant"}, "R")
        )
        for kind, delta in [("text", "Hel"), ("thinking", "hmm"), ("text", "lo wor")]:
            payload = {"messageId": "m2", "contentIndex": 0, "kind": kind, "delta": delta}
            events.append(NewEvent(len(events) + 1, "message.delta", payload, "R"))
    entries = [NewEntry(kind="message", payload=p, id=i) for i, p in messages]
    fields = {"status": status} if status != "idle" else None
    await store.commit_batch([(session.id, entries, events, fields)])
    await store.inputs.record(
        "k1", session_id=session.id, payload=_user("do it", "k1"), status="running", run_id="R"
    )
    await store.inputs.record(
        "k2", session_id=session.id, payload=_user("steered", "k2"), status="steered", run_id="R"
    )
    await store.inputs.record(
        "k3", session_id=session.id, payload=_user("queued", "k3"), status="queued", run_id="k3"
    )
    await store.inputs.record(
        "k4", session_id=session.id, payload=_user("old", "k4"), status="done", run_id="old"
    )
    return session.id


async def _status(store: Store, key: str) -> str:
    record = await store.inputs.get(key)
    assert record is not None
    return str(record.status)


@pytest.mark.parametrize("streaming", [True, False], ids=["while-streaming", "while-a-tool-ran"])
async def test_recovery_closes_the_cut_off_run(store: Store, streaming: bool) -> None:
    sid = await _crash_state(store, streaming=streaming)
    recorder = Recorder()
    journal = Journal(store, recorder)
    await journal.start()
    pending = await recover(store, journal)
    assert {s: [i.idempotency_key for i in inputs] for s, inputs in pending.items()} == {sid: ["k2", "k3"]}

    entries = [e for e in await store.transcript.read(sid) if e.kind == "message"]
    tail = entries[3:]
    if streaming:
        assert [e.id for e in tail] == ["m2"]  # the streamed message keeps its id
    else:
        assert [e.payload["role"] for e in tail] == ["toolResult", "assistant"]
        orphan = tail[0].payload
        assert (orphan["toolCallId"], orphan["isError"]) == ("c2", True)
        assert orphan["content"][0]["text"] == ORPHANED_TOOL_TEXT
    cut = tail[-1].payload
    assert cut["role"] == "assistant" and cut["stopReason"] == "aborted"
    assert cut["errorMessage"] == INTERRUPTED_TEXT
    assert cut["content"] == ([{"type": "text", "text": "Hello wor"}] if streaming else [])

    run = await store.runs.get("R")
    assert run is not None and (run.status, run.termination_reason) == ("interrupted", "interrupted")
    session = await store.tree.get_session(sid)
    assert session is not None and session.status == "interrupted"
    statuses = {k: await _status(store, k) for k in ("k1", "k2", "k3", "k4")}
    assert statuses == {"k1": "interrupted", "k2": "steered", "k3": "queued", "k4": "done"}
    events = await store.events.read(sid, limit=1000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events][-2:] == ["agent.finished", "status.changed"]
    assert events[-2].payload["terminationReason"] == "interrupted"
    assert [e.seq for e in recorder.events] == [
        e.seq for e in events if e.seq > len(events) - len(recorder.events)
    ]
    completed = [e.payload["messageId"] for e in events if e.type == "message.completed"]
    assert completed == [e.id for e in entries]

    # Running recovery again changes nothing.
    assert list(await recover(store, journal)) == [sid]
    assert len(await store.events.read(sid, limit=1000)) == len(events)
    assert len(await store.transcript.read(sid)) == len(entries)
    await journal.aclose()


async def test_a_run_whose_end_was_recorded_is_only_closed(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main", key="agent:main:main")
    await store.runs.create("R", session.id)
    await store.inputs.record(
        "k1", session_id=session.id, payload=_user("x", "k1"), status="running", run_id="R"
    )
    events = [
        NewEvent(1, "status.changed", {"status": "running"}, "R"),
        NewEvent(2, "agent.finished", {"terminationReason": "no_tool_calls"}, "R"),
        NewEvent(3, "status.changed", {"status": "idle"}, "R"),
    ]
    await store.commit_batch([(session.id, [], events[:1], {"status": "running"})])
    await store.commit_batch([(session.id, [], events[1:], {"status": "idle"})])
    journal = Journal(store, Recorder())
    await journal.start()
    assert await recover(store, journal) == {}
    run = await store.runs.get("R")
    assert run is not None and (run.status, run.termination_reason) == ("done", "no_tool_calls")
    assert await _status(store, "k1") == "done"
    assert len(await store.events.read(session.id)) == 3
    assert await store.transcript.read(session.id) == []
    await journal.aclose()


async def test_sessions_left_running_without_a_run_become_interrupted(store: Store) -> None:
    stale = await store.tree.create_session(agent_id="main", key="agent:main:stale")
    await store.commit_batch(
        [(stale.id, [], [NewEvent(1, "status.changed", {"status": "running"})], {"status": "running"})]
    )
    fresh = await store.tree.create_session(agent_id="main", key="agent:main:fresh")
    await store.runs.create("R2", fresh.id)  # created, the session never marked running
    journal = Journal(store, Recorder())
    await journal.start()
    await recover(store, journal)
    for sid in (stale.id, fresh.id):
        record = await store.tree.get_session(sid)
        assert record is not None and record.status == "interrupted"
        events = await store.events.read(sid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[-1].type == "status.changed" and events[-1].payload["status"] == "interrupted"
    await journal.aclose()


async def test_the_manager_runs_inputs_that_never_started(store_url: str, harnesses: HarnessFactory) -> None:
    async with Store.open(store_url) as store:
        sid = await _crash_state(store, streaming=True)
    h = await harnesses()
    assert (await h.wait("k2"))["status"] == "ok"
    assert (await h.wait("k3"))["status"] == "ok"
    assert (await h.texts(sid))[-3:] == [
        ("user", "steered"),
        ("user", "queued"),
        ("assistant", "echo: queued"),
    ]
    assert (await h.input("k1")).status == "interrupted"
    assert (await h.send(await h.manager.get(session_id=sid), "do it", "k1")).status == "aborted"
    record = await h.store.tree.get_session(sid)
    assert record is not None and record.status == "idle"
    events = await h.events(sid)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


# --- a real process, killed -------------------------------------------------------------------


class Gateways:
    """Gateway processes forked by `recovery_child.py`, each on its own database, killed at the
    test's chosen points."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: dict[str, asyncio.Queue[str]] = {}
        self.pids: dict[str, int] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, urls: list[str], log: Path) -> Gateways:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with log.open("wb") as errors:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(CHILD),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errors,
                env=env,
                cwd=REPO,
            )
        gateways = cls(proc)
        assert proc.stdin is not None
        for n, url in enumerate(urls):
            gateways.lines[str(n)] = asyncio.Queue()
            proc.stdin.write(f"RUN {n} {url}\n".encode())
        proc.stdin.write(b"GO\n")
        await proc.stdin.drain()
        return gateways

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            prefix, _, text = raw.decode().rstrip("\n").partition(" ")
            if prefix in self.lines:
                self.lines[prefix].put_nowait(text)

    async def next_line(self, n: int) -> str:
        return await asyncio.wait_for(self.lines[str(n)].get(), 30)

    async def kill_at(self, n: int, target: int, delay_s: float) -> list[dict[str, Any]]:
        """Wait for gateway `n`'s `target`-th committed event (or for it to go idle), and for it
        to have accepted every input (`READY`), then `delay_s` more; SIGKILL it and wait until it
        is gone. Returns the events it reported."""
        line = await self.next_line(n)
        assert line.startswith("PID "), line
        pid = int(line.split()[1])
        seen: list[dict[str, Any]] = []
        ready = False
        while len(seen) < target or not ready:
            line = await self.next_line(n)
            if line == "IDLE":
                break
            ready = ready or line == "READY"
            if line.startswith("{"):
                seen.append(json.loads(line))
        await asyncio.sleep(delay_s)
        os.kill(pid, signal.SIGKILL)
        while line != "EXIT":
            line = await self.next_line(n)
        return seen

    async def aclose(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()  # also ends the pipe; forked gateways still alive die with their pipe
        await self.proc.wait()
        await self.reader


async def _before_recovery(store: Store, sid: str) -> dict[str, Any]:
    """What the crash left: the open assistant message and its text, unanswered tool calls."""
    run = await store.runs.get("crash-main")
    events = [e for e in await store.events.read(sid, limit=10_000) if e.run_id == "crash-main"]
    open_id, text = None, ""
    for e in events:
        if e.type == "message.started" and e.payload.get("role") == "assistant":
            open_id, text = e.payload["messageId"], ""
        elif (
            e.type == "message.delta"
            and e.payload.get("messageId") == open_id
            and e.payload["kind"] == "text"
        ):
            text += e.payload["delta"]
        elif e.type == "message.completed" and e.payload["messageId"] == open_id:
            open_id, text = None, ""
    messages = [e.payload for e in await store.transcript.read(sid) if e.kind == "message"]
    calls = [
        b["id"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "toolCall"
    ]
    answered = {m["toolCallId"] for m in messages if m["role"] == "toolResult"}
    return {
        "in_flight": run is not None and run.status == "running",
        "open_id": open_id,
        "text": text,
        "orphans": [c for c in calls if c not in answered],
        "entries": len(messages),
    }


async def test_a_killed_gateway_recovers_its_sessions(tmp_path: Path) -> None:
    """Six kills at seeded random points (by committed-event count, plus up to 4 ms), each in a
    gateway process of its own; the processes run side by side, recovery is checked one by one
    (schema migrations are not safe to run concurrently in one process)."""
    rng = random.Random(1234)
    points = [(rng.randint(3, 60), rng.random() * 0.004) for _ in range(6)]
    homes = [tmp_path / f"crash-{n}" for n in range(len(points))]
    for home in homes:
        home.mkdir()
    gateways = await Gateways.start([default_url(home) for home in homes], tmp_path / "gateways.log")
    try:
        published = await asyncio.gather(
            *(gateways.kill_at(n, target, delay) for n, (target, delay) in enumerate(points))
        )
    finally:
        await gateways.aclose()
    in_flight = [
        await _recover_and_check(default_url(home), seen) for home, seen in zip(homes, published, strict=True)
    ]
    assert sum(in_flight) >= 5, f"only {sum(in_flight)} of the kills hit a run in flight"


async def _recover_and_check(url: str, published: list[dict[str, Any]]) -> bool:
    async with Store.open(url) as store:
        main = await store.tree.get_session_by_key("agent:main:main")
        other = await store.tree.get_session_by_key("agent:main:other")
        assert main is not None and other is not None
        before = await _before_recovery(store, main.id)
        journal = Journal(store, Recorder())
        await journal.start()
        await recover(store, journal)
        await journal.aclose()
        if before["in_flight"]:
            await _check_closed_run(store, main.id, before)

    # A restarted gateway runs what was accepted and never started.
    harnesses = HarnessFactory(url)
    h = await harnesses(tools=tools_factory(echo_tool()))
    try:
        for key in ("crash-main", "crash-follow", "crash-other"):
            outcome = await h.wait(key)
            assert outcome["status"] in ("ok", "aborted"), (key, outcome)
        if before["in_flight"]:
            assert (await h.wait("crash-main"))["status"] == "aborted"
        assert (await h.wait("crash-other"))["status"] == "ok"
        for session in (main, other):
            events = await h.events(session.id)
            assert [e.seq for e in events] == list(range(1, len(events) + 1)), "a hole in the event log"
        # Every message the killed gateway published is there, once; the run was not repeated.
        entries = {e.id: e for e in await h.transcript(main.id) if e.kind == "message"}
        for line in published:
            if line["name"] == "message.completed" and line["sid"] == main.id:
                assert line["messageId"] in entries
        prompts = [e for e in entries.values() if e.payload.get("idempotencyKey") == "crash-main"]
        assert len(prompts) == 1
        results = [e.payload["toolCallId"] for e in entries.values() if e.payload["role"] == "toolResult"]
        assert len(results) == len(set(results))
        starts = [
            e for e in await h.events(main.id) if e.type == "agent.started" and e.run_id == "crash-main"
        ]
        assert len(starts) <= 1
    finally:
        await harnesses.close_all()
    return bool(before["in_flight"])


async def _check_closed_run(store: Store, sid: str, before: dict[str, Any]) -> None:
    run = await store.runs.get("crash-main")
    assert run is not None and run.status == "interrupted"
    session = await store.tree.get_session(sid)
    assert session is not None and session.status == "interrupted"
    record = await store.inputs.get("crash-main")
    assert record is not None and record.status == "interrupted"
    messages = [e for e in await store.transcript.read(sid) if e.kind == "message"]
    added = messages[before["entries"] :]
    results = [m.payload for m in added if m.payload["role"] == "toolResult"]
    assert sorted(r["toolCallId"] for r in results) == sorted(before["orphans"])
    assert all(r["isError"] and r["content"][0]["text"] == ORPHANED_TOOL_TEXT for r in results)
    cut = added[-1]
    assert cut.payload["role"] == "assistant" and cut.payload["stopReason"] == "aborted"
    assert cut.payload["errorMessage"] == INTERRUPTED_TEXT
    streamed = "".join(b["text"] for b in cut.payload["content"] if b["type"] == "text")
    assert streamed == before["text"]
    if before["open_id"] is not None:
        assert cut.id == before["open_id"]
