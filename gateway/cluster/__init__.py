"""Several gatewayd nodes on one PostgreSQL and one Redis (`docs/cluster.md`).

A node joins a cluster when its database is PostgreSQL and `[cluster] redis_url` is set. The
parts, one module each: `membership` (the node's heartbeat row), `bus` (Redis pub/sub between
nodes), `relay` (remote events into the local hub, in order, gaps filled from the event log),
`leases` (named leases: channel accounts), `node` (the node's owner of all of it: takes over the
sessions of nodes that died, drains on stop). Session ownership and its fencing token live in
`sessions.ownership`, beside the writes they guard.
"""
