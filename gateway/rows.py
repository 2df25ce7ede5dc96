"""`SessionRow`: how a session is shown to clients (`sessions.list`, `sessions.describe`, trees,
`sessions.changed`). It carries the fields PROTOCOL.md names plus the OpenClaw fields clients
read most (`agentId`, `displayName`, token totals, `effectiveQueueMode`, `modelProvider`).
`model` is the model a run would use: the session's own (`modelOverride`), else its agent's.
`ownerNode` (in a cluster only) names the node whose lane holds the session."""

from __future__ import annotations

from typing import Any

from sessions import SessionManager, SessionRecord, SessionsError, TreeNode


def _effective_model(record: SessionRecord, manager: SessionManager | None) -> str | None:
    """The session's own model, else its agent's (what a run would use)."""
    if record.model or manager is None:
        return record.model
    try:
        return manager.directory.profile(record.agent_id).model
    except SessionsError:
        return None


def session_row(record: SessionRecord, manager: SessionManager | None = None) -> dict[str, Any]:
    active = manager.active_run_ids(record.id) if manager is not None else []
    keys = list(record.keys)
    key = keys[0] if keys else None
    model = _effective_model(record, manager)
    row: dict[str, Any] = {
        "key": key,
        "keys": keys,
        "sessionId": record.id,
        "agentId": record.agent_id,
        "kind": record.kind,
        "parentId": record.parent_id,
        "branchPoint": record.branch_point,
        "label": record.label,
        "displayName": record.label or (key.rsplit(":", 1)[-1] if key else record.id[:8]),
        "status": record.status,
        "archived": record.status == "archived",
        "hasActiveRun": bool(active),
        "activeRunIds": active,
        "model": model,
        "modelProvider": model.partition("/")[0] if model else None,
        "modelOverride": record.model,
        "thinkingLevel": record.thinking_level,
        "effectiveQueueMode": record.queue_mode,
        "inputTokens": record.input_tokens,
        "outputTokens": record.output_tokens,
        "totalTokens": record.total_tokens,
        "cost": record.cost,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "lastSeq": record.last_seq,
        "origin": record.origin,
    }
    if record.owner_node is not None:
        row["ownerNode"] = record.owner_node  # the cluster node whose lane holds the session
    return row


def tree_row(node: TreeNode, manager: SessionManager | None = None) -> dict[str, Any]:
    row = session_row(node.session, manager)
    row["children"] = [tree_row(child, manager) for child in node.children]
    return row
