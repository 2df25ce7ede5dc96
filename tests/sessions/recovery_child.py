"""Gateway stand-ins for the crash test (`test_recovery.py`), forked from one process that has
already imported everything (starting a fresh Python per kill would cost seconds each).

Protocol on stdin/stdout (one line each): the test writes `RUN <n> <database url>` for every
gateway it wants, then `GO`. For each, this process forks a gateway and prints `<n> PID <pid>`;
the gateway runs a SessionManager on that database, accepts the test's inputs, prints
`<n> READY`, then every committed session event as `<n> {json}`, and `<n> IDLE` once every run
ended; it runs until it is killed. This process prints `<n> EXIT` when gateway `n` is gone (the
test may open its database then) and ends when all are.

Inputs: on session `agent:main:main`, a slow streaming run with a tool call (`crash-main`) and a
follow-up (`crash-follow`); on `agent:main:other`, a run that waits for the only run slot
(`crash-other`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agent_core import AbortSignal, AgentTool, AgentToolResult, Model, TextContent, ToolUpdateCallback
from sessions.manager import SessionManager
from sessions.profiles import AgentProfile, RunContext, RunSettings
from sessions.session_events import SessionEvent
from sessions.store import Store

WORDS = " ".join(f"word{n}" for n in range(1, 41))
MAIN_PROMPT = "!tool echo " + json.dumps({"text": WORDS})
SETTINGS = RunSettings(max_concurrent_runs=1, idle_timeout_s=10.0, shutdown_grace_s=0.0)
PACE_MS = 5.0
TOOL_DELAY_S = 0.03
ECHO = Model(id="echo", api="faux", provider="faux", compat={"paceMs": PACE_MS})


class Directory:
    def profile(self, agent_id: str) -> AgentProfile:
        return AgentProfile(id=agent_id, model="faux/echo")

    def resolve_model(self, ref: str) -> Model:
        return ECHO

    def api_key(self, provider: str) -> str | None:
        return None


def tools(ctx: RunContext) -> list[AgentTool]:
    async def echo(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        await asyncio.sleep(TOOL_DELAY_S)
        return AgentToolResult(content=[TextContent(text=str(params["text"]))])

    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    return [AgentTool(name="echo", label="echo", description="echo", parameters=parameters, execute=echo)]


class Printer:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def publish(self, event: SessionEvent) -> None:
        line: dict[str, Any] = {"sid": event.session_id, "seq": event.seq, "name": event.name}
        fields = event.data.dump()
        if "messageId" in fields:
            line["messageId"] = fields["messageId"]
        say(self.prefix, json.dumps(line))


def say(prefix: str, text: str) -> None:
    # One write per line: lines of several gateways on one pipe never interleave.
    sys.stdout.write(f"{prefix} {text}\n")
    sys.stdout.flush()


async def gateway(prefix: str, url: str) -> None:
    store = await Store.open(url)
    manager = SessionManager(
        store, directory=Directory(), tools_factory=tools, publisher=Printer(prefix), settings=SETTINGS
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
    say(prefix, "READY")
    for key in ("crash-main", "crash-follow", "crash-other"):
        await manager.wait_run(key)
    say(prefix, "IDLE")
    await asyncio.Event().wait()


def main() -> None:
    wanted: list[tuple[str, str]] = []
    for line in sys.stdin:
        words = line.split()
        if words == ["GO"]:
            break
        if len(words) == 3 and words[0] == "RUN":
            wanted.append((words[1], words[2]))
    children: dict[int, str] = {}
    for prefix, url in wanted:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(gateway(prefix, url))
            finally:
                os._exit(1)
        children[pid] = prefix
        say(prefix, f"PID {pid}")
    while children:
        pid, _status = os.wait()
        if pid in children:
            say(children.pop(pid), "EXIT")


if __name__ == "__main__":
    main()
