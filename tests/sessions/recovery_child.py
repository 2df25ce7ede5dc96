"""A gateway stand-in for the crash test (`test_recovery.py`): it runs a SessionManager on the
database URL given as its argument, accepts the test's inputs, prints every committed session
event as one JSON line, and runs until it is killed.

Inputs: on session `agent:main:main`, a slow streaming run with a tool call (`crash-main`) and a
follow-up (`crash-follow`); on `agent:main:other`, a run that waits for the only run slot
(`crash-other`). It prints `READY` once all three are accepted and `IDLE` when every run ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

from sessions.manager import SessionManager
from sessions.session_events import SessionEvent
from sessions.store import Store
from tests.sessions.manager_support import FAST, Directory, echo_tool, tools_factory

WORDS = " ".join(f"word{n}" for n in range(1, 41))
MAIN_PROMPT = "!tool echo " + json.dumps({"text": WORDS})
SETTINGS = dataclasses.replace(FAST, max_concurrent_runs=1)
PACE_MS = 3.0
TOOL_DELAY_S = 0.03


class Printer:
    def publish(self, event: SessionEvent) -> None:
        line = {"sid": event.session_id, "seq": event.seq, "name": event.name, "run": event.run_id}
        if "messageId" in event.data:
            line["messageId"] = event.data["messageId"]
        print(json.dumps(line), flush=True)


async def main(url: str) -> None:
    store = await Store.open(url)
    manager = SessionManager(
        store,
        directory=Directory(pace_ms=PACE_MS),
        tools_factory=tools_factory(echo_tool(TOOL_DELAY_S)),
        publisher=Printer(),
        settings=SETTINGS,
    )
    await manager.start()
    main_session = await manager.ensure_session("agent:main:main")
    other = await manager.ensure_session("agent:main:other")
    await manager.submit(session=main_session, message=MAIN_PROMPT, idempotency_key="crash-main")
    while manager.running_count() == 0:
        await asyncio.sleep(0.001)
    await manager.submit(session=other, message="!long 5", idempotency_key="crash-other")
    await manager.submit(
        session=main_session, message="after the tool", idempotency_key="crash-follow", queue_mode="followup"
    )
    print("READY", flush=True)
    for key in ("crash-main", "crash-follow", "crash-other"):
        await manager.wait_run(key)
    print("IDLE", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
