"""`Publisher`: where the session manager publishes the events it committed.

The hub first learns which session the event's key names, so that subscriptions made by key
before the session existed follow it from this event on; then the bridge renders the event and
fans it out. In a cluster the event also goes to the other nodes (`gateway.cluster.node`), and
the events that come from them are handed to `local()`, which does not send them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.bridge import Bridge
from gateway.hub import Hub
from sessions import SessionEvent

if TYPE_CHECKING:
    from gateway.cluster.node import ClusterNode

__all__ = ["Publisher"]


class Publisher:
    """The session manager's `EventPublisher` (see the module)."""

    def __init__(self, hub: Hub, bridge: Bridge, *, remote: bool = False) -> None:
        self._hub = hub
        self._bridge = bridge
        self._remote = remote
        self.cluster: ClusterNode | None = None
        """In a cluster, where this node's committed events also go."""

    def publish(self, event: SessionEvent) -> None:
        self._hub.session_named(event.session_key, event.session_id)
        self._bridge.publish(event, remote=self._remote)
        if self.cluster is not None:
            self.cluster.published(event)

    def session_changed(self, session_id: str, reason: str) -> None:
        self._bridge.session_changed(session_id, reason)

    def local(self) -> Publisher:
        """A publisher to this node's clients only, for events that came from other nodes (the
        bridge's listeners that act where a run happens do not hear them)."""
        return Publisher(self._hub, self._bridge, remote=True)
