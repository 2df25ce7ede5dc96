"""OpenClaw-compatible streams: bytes one OpenClaw client receives for a reply of W words, beside
the native `session.*` stream of the same reply.

    .venv/bin/python -m bench.compat                 # W = 1,000, 2,000 and 4,000 at 20 ms/word
    .venv/bin/python -m bench.compat --quick         # W = 100, 200, 400 at 2 ms/word
    .venv/bin/python -m bench.compat --pace-ms 10    # another model speed

One `gatewayd` (faux/echo, the model's pace `--pace-ms`, 20 ms a word by default: about 50 words
a second, a brisk real model) in a temporary home. Two clients connect:

- an OpenClaw client: no caps, as the OpenClaw CLI connects, so it gets every session's `agent`
  and `chat` frames (the assistant stream and chat deltas each carry the whole reply so far);
- a native client: caps `session-scoped-events` and `native-events-only`, following each session
  with `sessions.events.subscribe`.

Each reply length gets a session of its own and the replies stream at the same time (`!long W`,
the words `w1 ... wW`). Counted per reply, as received (WebSocket payload bytes, UTF-8):

- bytes: the OpenClaw client's `agent` and `chat` frames of the run, against the native client's
  `session.*` frames of the session from subscription to the run's end (the baseline);
- frames: the same two streams counted in frames.

A row is marked `[incomplete]` when the OpenClaw client's final `chat` frame does not carry the
whole reply text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from dataclasses import dataclass, field

from bench._daemon import gateway_daemon
from bench._report import Row, render
from bench._wire import EventCallback, WireClient

RUN_TIMEOUT_S = 600.0
_RUN_ID = re.compile(rb'"runId":"([^"]+)"')
_SESSION_KEY = re.compile(rb'"sessionKey":"([^"]+)"')
_AGENT_OR_CHAT = (b'{"type":"event","event":"agent"', b'{"type":"event","event":"chat"')
_CHAT = b'{"type":"event","event":"chat"'
_NATIVE = b'{"type":"event","event":"session.'
_IDLE = b'{"type":"event","event":"session.status.changed"'


@dataclass
class Stream:
    """What one client received of one reply."""

    bytes: int = 0
    frames: int = 0
    final_text: str | None = None
    done: bool = False


@dataclass
class Counter:
    """Counts frames per reply as they arrive; `finished` is set whenever a reply ends."""

    finished: asyncio.Event
    streams: dict[str, Stream] = field(default_factory=dict)

    def stream(self, name: str) -> Stream:
        return self.streams.setdefault(name, Stream())


def _compat_receiver(counter: Counter, run_ids: set[str]) -> EventCallback:
    def receive(payload: bytes, now: float) -> None:
        if not payload.startswith(_AGENT_OR_CHAT):
            return
        match = _RUN_ID.search(payload, 0, 400)
        if match is None or match.group(1).decode() not in run_ids:
            return
        stream = counter.stream(match.group(1).decode())
        stream.bytes += len(payload)
        stream.frames += 1
        if payload.startswith(_CHAT) and b'"state":"delta"' not in payload:
            chat = json.loads(payload)["payload"]
            message = chat.get("message") or {}
            stream.final_text = "".join(
                block.get("text", "") for block in message.get("content", []) if block.get("type") == "text"
            )
            stream.done = True
            counter.finished.set()

    return receive


def _native_receiver(counter: Counter, keys: set[str]) -> EventCallback:
    def receive(payload: bytes, now: float) -> None:
        if not payload.startswith(_NATIVE):
            return
        match = _SESSION_KEY.search(payload, 0, 400)
        if match is None or match.group(1).decode() not in keys:
            return
        stream = counter.stream(match.group(1).decode())
        stream.bytes += len(payload)
        stream.frames += 1
        if payload.startswith(_IDLE) and b'"status":"idle"' in payload:
            stream.done = True
            counter.finished.set()

    return receive


async def _until_done(counters: list[Counter], names: list[set[str]]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for counter, wanted in zip(counters, names, strict=True):
        while not all(counter.stream(name).done for name in wanted):
            counter.finished.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(counter.finished.wait(), remaining)
            except TimeoutError:
                return


async def _measure(port: int, token: str, words: list[int]) -> tuple[dict[int, Stream], dict[int, Stream]]:
    """Stream one reply of each length at once: (OpenClaw client's streams, native client's)."""
    keys = {w: f"agent:main:bench-compat-{w}" for w in words}
    run_ids = {w: f"compat-{w}" for w in words}
    openclaw = await WireClient.open("127.0.0.1", port)
    native = await WireClient.open("127.0.0.1", port)
    try:
        await openclaw.gateway_connect(token, caps=())
        await native.gateway_connect(token)
        for key in keys.values():
            await native.request("sessions.create", {"key": key})
        compat_counter = Counter(asyncio.Event())
        native_counter = Counter(asyncio.Event())
        openclaw.on_event = _compat_receiver(compat_counter, set(run_ids.values()))
        native.on_event = _native_receiver(native_counter, set(keys.values()))
        for key in keys.values():
            await native.request("sessions.events.subscribe", {"key": key})
        await asyncio.gather(
            *(
                native.request(
                    "chat.send",
                    {"sessionKey": keys[w], "message": f"!long {w}", "idempotencyKey": run_ids[w]},
                )
                for w in words
            )
        )
        await _until_done([compat_counter, native_counter], [set(run_ids.values()), set(keys.values())])
    finally:
        openclaw.close()
        native.close()
    return (
        {w: compat_counter.stream(run_ids[w]) for w in words},
        {w: native_counter.stream(keys[w]) for w in words},
    )


def _rows(
    words: list[int], pace_ms: float, compat: dict[int, Stream], native: dict[int, Stream]
) -> list[Row]:
    rows = []
    for w in words:
        got, base = compat[w], native[w]
        expected = " ".join(f"w{i}" for i in range(1, w + 1))
        note = "" if got.done and got.final_text == expected else " [incomplete]"
        note += "" if base.done else " [native timed out]"
        setting = f"W={w:,}, {pace_ms:g} ms/word"
        rows.append(
            Row(
                f"bytes to an OpenClaw client{note}",
                setting,
                got.bytes / 1e6,
                "MB",
                "native stream",
                base.bytes / 1e6,
            )
        )
        rows.append(
            Row(f"frames to an OpenClaw client{note}", setting, got.frames, "", "native stream", base.frames)
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="W = 100, 200, 400 at 2 ms/word")
    parser.add_argument("--pace-ms", type=float, help="faux pace per word (default 20, quick 2)")
    args = parser.parse_args(argv)
    words = [100, 200, 400] if args.quick else [1000, 2000, 4000]
    pace = args.pace_ms if args.pace_ms is not None else (2.0 if args.quick else 20.0)
    started = time.perf_counter()
    with gateway_daemon(env={"GATEWAY_FAUX_PACE_MS": f"{pace:g}"}) as daemon:
        compat, native = asyncio.run(_measure(daemon.port, daemon.token, words))
    print(render(_rows(words, pace, compat, native)))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
