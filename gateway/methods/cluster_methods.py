"""`cluster.status`: the nodes of the cluster, what each holds and how busy it is.

In a cluster the answer comes from the database: each node's heartbeat row (its liveness on the
database's clock, and the runs and live sessions it reported at its last heartbeat), the owner
of each session and the holder of each lease. On a single node it comes from memory: the node
itself, holding every session and every chat account it runs.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from gateway import __version__
from gateway.cluster.membership import Membership, NodeRow, holdings
from gateway.methods.base import Call, from_sessions_error
from gateway.protocol import params as p
from sessions import SessionsError
from sessions.db import Database

if TYPE_CHECKING:
    from gateway.state import GatewayState


async def cluster_status(call: Call, params: p.NativeEmptyParams) -> Any:
    state = call.state
    if state.cluster is None:
        return await single_node_status(state)
    try:
        return await clustered_status(state.cluster, state.store.database)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def clustered_status(membership: Membership, database: Database) -> dict[str, Any]:
    """Every node with a row, by node id, then what the nodes hold. `sessionsUnowned` counts
    the sessions no node holds. Raises SessionsError when the database fails."""
    nodes = await membership.nodes()
    held = await holdings(database)
    return {
        "clustered": True,
        "node": membership.node_id,
        "nodes": [
            _node_entry(node, held.sessions.get(node.node_id, 0), held.leases.get(node.node_id, []))
            for node in nodes
        ],
        "sessionsUnowned": held.unowned,
    }


async def single_node_status(state: GatewayState) -> dict[str, Any]:
    """This node alone: it holds every session and every configured chat account."""
    summary = await state.sessions_summary.current()
    accounts = [
        f"channel:{entry.get('channel')}:{entry.get('accountId')}"
        for entry in state.channels_status()
        if entry.get("channel") and entry.get("accountId")
    ]
    node = {
        "nodeId": state.node_id,
        "state": "draining" if state.stopping else "running",
        "alive": True,
        "heartbeatAgeMs": 0,
        "startedAt": int(state.started_at * 1000),
        "sessionsOwned": summary.count,
        "channelAccounts": accounts,
        "runs": state.manager.running_count(),
        "liveSessions": state.manager.live_count(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
    }
    return {"clustered": False, "node": state.node_id, "nodes": [node]}


def _node_entry(node: NodeRow, sessions_owned: int, leases: list[str]) -> dict[str, Any]:
    return {
        "nodeId": node.node_id,
        "state": node.state.value,
        "alive": node.alive,
        "heartbeatAgeMs": node.heartbeat_age_ms,
        "startedAt": node.started_at,
        "expiresAt": node.expires_at,
        "sessionsOwned": sessions_owned,
        "channelAccounts": leases,
        "runs": _count(node.info.get("runs")),
        "liveSessions": _count(node.info.get("liveSessions")),
        "host": node.info.get("host"),
        "pid": node.info.get("pid"),
        "version": node.info.get("version"),
    }


def _count(value: Any) -> int | None:
    """A count a node reported in its `info`, or None when it did not."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
