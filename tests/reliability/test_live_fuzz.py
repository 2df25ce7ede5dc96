"""Fuzzing the live daemon over WebSocket: random, truncated, oversize and mistyped frames, invalid
UTF-8 in binary frames, frames before `connect`, silent connections and request floods. Every bad
frame must get the documented answer or close code (PROTOCOL.md, `gateway.protocol.frames`), while
a bystander keeps streaming a run and getting answers, and the daemon's memory returns near where
it started. Frames are generated from the suite's seed (`GATEWAY_RELIABILITY_SEED`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from bench._report import percentile
from gateway.protocol.methods import METHODS
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import SEED, Follower, connected, log_records, rng, rss_bytes

pytestmark = pytest.mark.slow

MAX_PAYLOAD = 256 * 1024
PREAUTH_MAX = 64 * 1024
HANDSHAKE_TIMEOUT_S = 1.5
CONNECTIONS = 120
FRAMES_PER_CONNECTION = 12
FIRST_FRAME_CONNECT = "invalid handshake: first request must be connect"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    config = f"""
[gateway]
max_payload = {MAX_PAYLOAD}
preauth_max_payload = {PREAUTH_MAX}
handshake_timeout_s = {HANDSHAKE_TIMEOUT_S}
"""
    running = start_daemon(tmp_path_factory.mktemp("fuzz"), config=config, env={"GATEWAY_FAUX_PACE_MS": "10"})
    try:
        yield running
    finally:
        running.stop()


def connect_frame(token: str) -> str:
    params = {
        "minProtocol": 4,
        "maxProtocol": 4,
        "client": {"id": "fuzz", "version": "1", "platform": "linux", "mode": "cli"},
        "role": "operator",
        "scopes": ["operator.read", "operator.write", "operator.admin"],
        "caps": [],
        "auth": {"token": token},
    }
    return json.dumps({"type": "req", "id": "connect", "method": "connect", "params": params})


async def _open(daemon: Daemon) -> ClientConnection:
    ws = await websockets.connect(
        daemon.url, max_size=None, compression=None, ping_interval=None, open_timeout=10, max_queue=None
    )
    challenge = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert challenge["event"] == "connect.challenge"
    return ws


async def _next(ws: ClientConnection, timeout: float = 10.0) -> dict[str, Any] | tuple[int | None, str]:
    """The next response frame (events skipped), or `(close code, reason)` once the server closed."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("type") == "res":
                    return dict(frame)
    except websockets.ConnectionClosed as exc:
        return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (None, "")


async def _send(ws: ClientConnection, data: str | bytes) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        await ws.send(data)


# --- frame generators: each returns (data, expectation) -------------------------------------------
# Expectations: ("close", codes) - the server closes with one of `codes` and answers nothing;
# ("answer", code, message prefix, then-close code or None).

JSON_ATOMS = [None, True, 0, -1, 2**63, 1.5, "", "x", [], {}, [1, "a"], {"k": None}]


def _value(r: random.Random, depth: int = 0) -> Any:
    pick = r.random()
    if depth > 3 or pick < 0.5:
        return r.choice([*JSON_ATOMS, "".join(r.choice('ab é😀\\"{}') for _ in range(r.randint(0, 12)))])
    if pick < 0.75:
        return [_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(["key", "sessionKey", "message", "limit", "afterSeq", "x"]): _value(r, depth + 1)
            for _ in range(r.randint(0, 4))}  # fmt: skip


def preauth_frame(r: random.Random) -> tuple[str | bytes, tuple[Any, ...]]:
    kind = r.choice(["garbage", "binary", "no-id", "not-connect", "oversize", "truncated", "surrogate"])
    if kind == "garbage":
        return "".join(r.choice("{}[]:,x1\"' ") for _ in range(r.randint(1, 60))) + "\x01", ("close", {1000})
    if kind == "binary":
        return bytes([0xFF, 0xFE, r.randint(0x80, 0xBF)]) + r.randbytes(r.randint(0, 40)), ("close", {1000})
    if kind == "no-id":
        return json.dumps(r.choice([[], 1, "s", {"type": "req", "method": "connect"}, {"id": ""}])), (
            "close",
            {1008},
        )
    if kind == "not-connect":
        method = r.choice([*METHODS, "nope"])
        frame = json.dumps({"type": "req", "id": "p1", "method": method, "params": _value(r)})
        return frame, ("answer", "INVALID_REQUEST", FIRST_FRAME_CONNECT, 1008)
    if kind == "oversize":
        return json.dumps({"type": "req", "id": "big", "method": "connect", "pad": "x" * PREAUTH_MAX}), (
            "close",
            {1009},
        )
    if kind == "truncated":
        full = connect_frame("secret")
        return full[: r.randint(1, len(full) - 1)], ("close", {1000})
    return '{"type":"req","id":"s","method":"connect","params":{"x":"\\ud800"}}', ("close", {1000})


def session_frame(r: random.Random, token: str) -> tuple[str | bytes, tuple[Any, ...]]:
    # Frames the connection survives come more often, so each connection carries several.
    kind = r.choices(
        ["unknown-method", "mistyped-params", "bad-shape", "second-connect", "garbage", "binary",
         "oversize", "surrogate", "deep", "huge-number"],
        weights=[6, 12, 6, 3, 1, 1, 1, 1, 1, 1],
    )[0]  # fmt: skip
    rid = f"f{r.randint(0, 10**9)}"
    if kind == "unknown-method":
        method = "".join(r.choice("abc.") for _ in range(r.randint(1, 20))) + ".zz"
        return json.dumps({"type": "req", "id": rid, "method": method}), (
            "answer",
            "INVALID_REQUEST",
            f"unknown method: {method}",
            None,
        )
    if kind == "mistyped-params":
        method = r.choice(sorted(METHODS))
        params = (
            _value(r) if r.random() < 0.5 else {"key": _value(r), "sessionKey": _value(r), "limit": _value(r)}
        )
        return json.dumps({"type": "req", "id": rid, "method": method, "params": params}), ("handled", rid)
    if kind == "bad-shape":
        frame = {
            "id": rid,
            "type": r.choice(["res", "event", None, 1]),
            "method": r.choice(["health", None, 3, ""]),
        }
        return json.dumps(frame), ("answer", "INVALID_REQUEST", "invalid request frame: ", None)
    if kind == "second-connect":
        return connect_frame(token).replace('"connect","method"', f'"{rid}","method"'), (
            "answer", "INVALID_REQUEST", "invalid handshake: already connected", None)  # fmt: skip
    if kind == "garbage":
        return "".join(r.choice('{}[]:,x1"') for _ in range(r.randint(1, 40))) + "]", ("close", {1008})
    if kind == "binary":
        return b"\xc3\x28" + r.randbytes(r.randint(0, 30)), ("close", {1008})
    if kind == "oversize":
        return json.dumps({"type": "req", "id": rid, "method": "health", "pad": "y" * MAX_PAYLOAD}), (
            "close",
            {1009},
        )
    if kind == "surrogate":
        frame = '{"type":"req","id":"' + rid + '","method":"health","params":{"a":"\\udc00"}}'
        return frame, ("close", {1008})
    if kind == "deep":
        return '{"type":"req","id":"d","method":"health","params":' + "[" * 50_000 + "]" * 50_000 + "}", (
            "close",
            {1008},
        )
    return '{"type":"req","id":"n","method":"health","params":{"n":' + "7" * 5000 + "}}", ("close", {1008})


async def _check(ws: ClientConnection, data: str | bytes, expect: tuple[Any, ...], where: str) -> bool:
    """Send one frame and check the outcome; True when the connection is still open."""
    await _send(ws, data)
    got = await _next(ws)
    if expect[0] == "close":
        assert isinstance(got, tuple) and got[0] in expect[1], (
            f"{where}: expected close {expect[1]}, got {got}"
        )
        return False
    assert isinstance(got, dict), f"{where}: expected an answer, got close {got}"
    if expect[0] == "handled":
        assert got["id"] == expect[1], (where, got)
        error = got.get("error") or {}
        assert got["ok"] or error.get("code") in ("INVALID_REQUEST", "NOT_FOUND"), (where, got)
        assert "internal error" not in str(error.get("message")), (where, got)
        return True
    _, code, prefix, then_close = expect
    assert not got["ok"] and got["error"]["code"] == code, (where, got)
    assert got["error"]["message"].startswith(prefix), (where, got)
    if then_close is not None:
        closed = await _next(ws)
        assert isinstance(closed, tuple) and closed[0] == then_close, (where, closed)
        return False
    return True


async def _fuzz_connection(daemon: Daemon, index: int, outcomes: Counter[str]) -> None:
    r = rng(f"fuzz-{index}")
    ws = await _open(daemon)
    try:
        if r.random() < 0.3:  # before connect
            data, expect = preauth_frame(r)
            await _check(ws, data, expect, f"seed {SEED}, connection {index}, before connect")
            outcomes["preauth:" + str(expect[-1] if expect[0] == "answer" else sorted(expect[1]))] += 1
            return
        await _send(ws, connect_frame(daemon.token))
        hello = await _next(ws)
        assert isinstance(hello, dict) and hello["ok"], hello
        for n in range(FRAMES_PER_CONNECTION):
            data, expect = session_frame(r, daemon.token)
            where = f"seed {SEED}, connection {index}, frame {n}: {str(data)[:100]!r}"
            outcomes[expect[0]] += 1
            if not await _check(ws, data, expect, where):
                return
        # Still usable after everything it was sent.
        await _send(ws, json.dumps({"type": "req", "id": "alive", "method": "health"}))
        alive = await _next(ws)
        assert isinstance(alive, dict) and alive["ok"], alive
    finally:
        await ws.close()


async def _bystander(daemon: Daemon, stop: asyncio.Event) -> tuple[list[float], Follower, dict[str, Any]]:
    """Streams a run and asks `health` every 50 ms until `stop`; returns the answer times."""
    key = "agent:main:bystander"
    times: list[float] = []
    async with connected(daemon) as client:
        await client.call("sessions.create", {"key": key})
        answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
        follower = Follower(key, session_id=answer["sessionId"])
        await client.call(
            "chat.send", {"sessionKey": key, "message": "!long 250", "idempotencyKey": "bystander"}
        )
        while not stop.is_set():
            started = time.monotonic()
            await client.call("health", timeout=10)
            times.append(time.monotonic() - started)
            follower.feed(client.drain_events())
            await asyncio.sleep(0.05)
        outcome = await client.call("agent.wait", {"runId": "bystander", "timeoutMs": 30_000})
        last = (await client.call("sessions.describe", {"key": key}))["lastSeq"]
        while follower.last_seq < last:
            frame = await client.next_event(timeout=10)
            assert frame is not None
            follower.feed([frame])
        assert client.gaps == 0 and client.close_code is None
    return times, follower, outcome


async def test_fuzzed_frames_get_documented_answers_while_a_bystander_is_unaffected(daemon: Daemon) -> None:
    async with connected(daemon) as warm:
        await warm.call("health")
    await asyncio.sleep(0.5)
    baseline = rss_bytes(daemon)
    stop = asyncio.Event()
    bystander = asyncio.create_task(_bystander(daemon, stop))
    outcomes: Counter[str] = Counter()
    gate = asyncio.Semaphore(8)

    async def one(index: int) -> None:
        async with gate:
            await _fuzz_connection(daemon, index, outcomes)

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(CONNECTIONS)))
    # A silent connection is closed once the handshake time is up.
    silent = await _open(daemon)
    assert await _next(silent, timeout=HANDSHAKE_TIMEOUT_S + 5) == (1008, "handshake timeout")
    stop.set()
    times, follower, outcome = await bystander
    print(f"fuzzed {sum(outcomes.values())} frames in {time.monotonic() - started:.1f}s: {dict(outcomes)}")

    assert outcome["status"] == "ok" and outcome["text"] == " ".join(f"w{i}" for i in range(1, 251)), outcome
    assert [e["sessionSeq"] for e in follower.events] == list(range(1, follower.last_seq + 1))
    assert len(times) > 10 and max(times) < 2.0 and percentile(times, 0.99) < 1.0, sorted(times)[-5:]
    assert outcomes["close"] and outcomes["answer"] and outcomes["handled"], outcomes
    crashed = [r for r in log_records(daemon) if "exception" in r]
    assert not crashed, f"the daemon logged exceptions while fuzzed: {crashed[:3]}"
    await asyncio.sleep(1.0)
    grew = (rss_bytes(daemon) - baseline) / 2**20
    assert grew < 40, f"daemon RSS is {grew:.1f} MiB above its baseline after the fuzzing"


async def test_request_flood_is_rate_limited_and_every_request_answered(daemon: Daemon) -> None:
    ws = await _open(daemon)
    try:
        await _send(ws, connect_frame(daemon.token))
        assert (await _next(ws))["ok"]  # type: ignore[index]
        count = 400
        for n in range(count):
            await ws.send(json.dumps({"type": "req", "id": f"flood-{n}", "method": "health"}))
        answers: dict[str, dict[str, Any]] = {}
        while len(answers) < count:
            got = await _next(ws)
            assert isinstance(got, dict), f"closed during the flood: {got}"
            answers[got["id"]] = got
        refused = [a for a in answers.values() if not a["ok"]]
        assert refused, "a flood of 400 requests was not rate-limited"
        for answer in refused:
            error = answer["error"]
            assert error["code"] == "UNAVAILABLE" and error["retryable"] and error["retryAfterMs"] > 0, error
        assert len(refused) < count, "nothing got through"
        await asyncio.sleep(2.5)  # the bucket refills; the connection still works
        await _send(ws, json.dumps({"type": "req", "id": "after", "method": "health"}))
        assert (await _next(ws))["ok"]  # type: ignore[index]
    finally:
        await ws.close()
