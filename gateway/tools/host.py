"""The gateway tools' view of the gateway (`GatewayToolsHost`), over the session manager."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core import AbortSignal
from sessions.ids import new_id

if TYPE_CHECKING:
    from gateway.state import GatewayState


class ManagerToolsHost:
    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def branch_session(self, session_id: str, label: str | None) -> dict[str, Any]:
        store = self.state.store
        parent = await store.tree.get_session(session_id)
        base = (
            parent.keys[0] if parent is not None and parent.keys else f"agent:main:session:{session_id[:8]}"
        )
        branch = await store.tree.branch(session_id, key=f"{base}:branch:{new_id()[-8:]}", label=label)
        self.state.bridge.session_changed(branch.id, "branch")
        return {"key": branch.keys[0] if branch.keys else None, "sessionId": branch.id}

    async def spawn_subagent(
        self,
        parent_session_id: str,
        prompt: str,
        *,
        agent_id: str | None,
        label: str | None,
        signal: AbortSignal | None,
    ) -> dict[str, Any]:
        manager = self.state.manager
        store = self.state.store
        parent = await store.tree.get_session(parent_session_id)
        if parent is None:
            raise RuntimeError("the parent session no longer exists")
        base = parent.keys[0] if parent.keys else f"agent:{parent.agent_id}:session:{parent.id[:8]}"
        child = await store.tree.create_session(
            agent_id=agent_id or parent.agent_id,
            key=f"{base}:subagent:{new_id()[-8:]}",
            kind="subagent",
            parent_id=parent.id,
            label=label,
        )
        self.state.bridge.session_changed(child.id, "create")
        run_id = new_id()
        await manager.submit(session=child, message=prompt, idempotency_key=run_id)
        remove = None
        if signal is not None:

            def on_abort() -> None:
                import asyncio

                task = asyncio.ensure_future(manager.abort(child.id))
                self.state.track(task)

            remove = signal.add_listener(on_abort)
        try:
            result = await manager.wait_run(run_id, None) or {"status": "error", "errorMessage": "no result"}
        finally:
            if remove is not None:
                remove()
        return {**result, "sessionId": child.id, "key": child.keys[0] if child.keys else None}

    async def interrupt_run(self, session_id: str, reason: str | None) -> None:
        await self.state.manager.abort(session_id)

    async def reload_config(self) -> dict[str, Any]:
        return await self.state.reload_config()
