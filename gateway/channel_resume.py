"""Finishing the replies a previous process left in flight, before the bindings start.

After a crash (or a stop that cut a reply short) the outbox holds chunks in `pending`, `sent` or
`edited`; their text is whatever the relay saved last. By the time the bindings start, session
recovery has closed every run that was cut off, so each run's whole reply is known: the text of
its assistant messages in the event log (for a cut-off run, the text streamed before the crash),
plus the notice for how it ended. `settle_outbox` rewrites the saved chunk texts to that reply,
split as the relay splits it, and adds `pending` records for chunks that were never posted.

The binding's own outbox recovery (`ReplyRelay.recover`) then edits the messages that exist and
posts the pending ones with their idempotency keys: a reply is finished by editing, never posted
twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import structlog

from bindings import OutboxRecord, chunk_text, outbox_key, render_reply
from bindings.outbox import EMPTY_CHUNK
from gateway.channel_replies import ReplyText, reply_kind
from gateway.channel_store import ChannelStore
from sessions import read_payload
from sessions.schema import RunStatus
from sessions.store import Store

log = structlog.get_logger("gateway.channels")

_PAGE = 1000


async def run_reply_text(store: Store, session_id: str, run_id: str) -> str:
    """The visible reply of a run, rebuilt from the session's event log."""
    text = ReplyText()
    after = 0
    while True:
        batch = await store.events.read(session_id, after_seq=after, limit=_PAGE)
        if not batch:
            return text.text
        for event in batch:
            if event.run_id == run_id and isinstance(event.payload, dict):
                text.apply(read_payload(event.type, event.payload))
        after = batch[-1].seq


async def runs_in_flight(
    channels: ChannelStore, sessions: Store, *, platform: str, account_id: str
) -> list[str]:
    """Runs with unfinished outbox records of one account that are still recorded as running
    (in a cluster: cut off on a node that died, until the node taking its session closes them)."""
    pending = {record.run_id for record in await channels.outbox_pending(platform, account_id)}
    running = []
    for run_id in sorted(pending):
        run = await sessions.runs.get(run_id)
        if run is not None and run.status == RunStatus.RUNNING:
            running.append(run_id)
    return running


def reply_chunks(text: str, termination_reason: str | None, chunk_limit: int) -> list[str]:
    """The message texts the relay would show for a finished run (see `bindings.outbox`)."""
    rendered = render_reply(text, reply_kind(termination_reason))
    if not rendered.strip():
        return []
    return [chunk if chunk.strip() else EMPTY_CHUNK for chunk in chunk_text(rendered, chunk_limit)]


async def settle_outbox(
    channels: ChannelStore, sessions: Store, *, platform: str, account_id: str, chunk_limit: int
) -> int:
    """Bring the unfinished outbox records of one account up to their runs' final replies.
    Returns how many records were changed or added. Runs still running are left alone."""
    by_run: dict[str, list[OutboxRecord]] = defaultdict(list)
    for record in await channels.outbox_pending(platform, account_id):
        by_run[record.run_id].append(record)
    changed = 0
    for run_id, records in by_run.items():
        run = await sessions.runs.get(run_id)
        if run is None or run.status == RunStatus.RUNNING:
            continue
        text = await run_reply_text(sessions, run.session_id, run_id)
        chunks = reply_chunks(text, run.termination_reason, chunk_limit)
        changed += await _rewrite(channels, records, chunks)
    if changed:
        log.info(
            "outbox brought up to the finished replies",
            platform=platform,
            account=account_id,
            records=changed,
        )
    return changed


async def _rewrite(channels: ChannelStore, records: list[OutboxRecord], chunks: list[str]) -> int:
    changed = 0
    by_index = {record.chunk_index: record for record in records}
    for record in records:
        if record.chunk_index < len(chunks) and chunks[record.chunk_index] != record.text:
            await channels.outbox_update(record.key, state=record.state, text=chunks[record.chunk_index])
            changed += 1
    first = min(records, key=lambda r: r.chunk_index)
    for index in range(max(by_index) + 1, len(chunks)):
        record = OutboxRecord(
            key=outbox_key(first.platform, first.account_id, first.run_id, index),
            platform=first.platform,
            account_id=first.account_id,
            route=replace(first.route, reply_to=None),
            run_id=first.run_id,
            chunk_index=index,
            text=chunks[index],
        )
        if await channels.outbox_add(record):
            changed += 1
    return changed
