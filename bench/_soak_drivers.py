"""The soak's drivers: each session a loop of send, wait for the run, think, again (one send in
ten repeated with the same idempotency key, as a client retrying), the totals they keep, and the
check at the end that each key's message is in its session's transcript exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gateway.client import CallError, GatewayClient

__all__ = ["MESSAGES", "Totals", "call", "drive", "verify_transcripts"]

MESSAGES = (
    '!tool bash {"command": "echo hi"}',
    "!long 50",
    "plain text for the echo model",
)


@dataclass
class Totals:
    runs: int = 0
    retries: int = 0
    failed: list[str] = field(default_factory=list)
    duplicate_answers: list[str] = field(default_factory=list)
    sent: dict[str, list[str]] = field(default_factory=dict)
    """Session key -> the idempotency keys sent to it."""


async def call(client: GatewayClient, method: str, params: dict[str, Any], *, timeout: float = 60) -> Any:
    """A call that waits out `UNAVAILABLE` (rate limits) as a client should."""
    while True:
        try:
            return await client.call(method, params, timeout=timeout)
        except CallError as exc:
            if exc.code != "UNAVAILABLE":
                raise
            await asyncio.sleep((exc.retry_after_ms or 200) / 1000)


async def drive(
    client: GatewayClient,
    key: str,
    totals: Totals,
    stop: asyncio.Event,
    rand: random.Random,
    think: tuple[float, float],
) -> None:
    await asyncio.sleep(rand.uniform(0, think[1]))
    n = 0
    while not stop.is_set():
        n += 1
        idem = f"{key.rsplit(':', 1)[1]}-{n}"
        message = rand.choice(MESSAGES)
        totals.sent.setdefault(key, []).append(idem)
        params = {"sessionKey": key, "message": message, "idempotencyKey": idem}
        answer = await call(client, "chat.send", params)
        if answer["status"] != "started":
            totals.duplicate_answers.append(f"{idem}: first send answered {answer['status']}")
        if rand.random() < 0.1:
            await asyncio.sleep(rand.uniform(0, 1.0))
            again = await call(client, "chat.send", params)
            totals.retries += 1
            if again["status"] not in ("in_flight", "ok"):
                totals.duplicate_answers.append(f"{idem}: the retry answered {again['status']}")
        outcome = await call(client, "agent.wait", {"runId": idem, "timeoutMs": 120_000}, timeout=130)
        totals.runs += 1
        if outcome["status"] != "ok":
            totals.failed.append(f"{idem}: {outcome}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), rand.uniform(*think))


async def verify_transcripts(client: GatewayClient, totals: Totals) -> list[str]:
    """Each key's message exactly once in its session's transcript."""
    duplicates = []
    for key, sent in totals.sent.items():
        counts: Counter[str] = Counter()
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"sessionKey": key, "limit": 1000}
            if cursor is not None:
                params["cursor"] = cursor
            page = await call(client, "chat.history", params)
            for message in page["messages"]:
                if message.get("role") == "user" and message.get("idempotencyKey"):
                    counts[message["idempotencyKey"]] += 1
            if not page.get("hasMore"):
                break
            cursor = page["cursor"]
        for idem in sent:
            if counts[idem] != 1:
                duplicates.append(f"{key} {idem}: in the transcript {counts[idem]} times")
        for idem, count in counts.items():
            if idem not in sent:
                duplicates.append(f"{key} {idem}: in the transcript but never sent ({count})")
    return duplicates
