"""The sandbox layer of the gateway's tool pipeline.

File tools are confined to the session's workspace (symlinks included), every shell command
passes exec mediation (a classifier over the bash syntax tree with risk tiers, a deny threshold
and an audit trail), and `bash` runs under the strongest runner that confines it on this machine
(bubblewrap, else a one-off unprivileged user), with resource limits, or is refused; running
unconfined takes the explicit mode ``unsafe-host``. docs/security.md states the guarantees.

The runners, the machine that picks one and the settings are what the daemon uses from start-up
on (it probes the runners then). Exec mediation (the bash grammar) and the layer are imported
with the first name of theirs asked for here, which is when the first run's tools are built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.lazy_exports import exports_on_first_use
from gateway.sandbox.errors import (
    CommandRefusedError,
    PathOutsideWorkspaceError,
    SandboxError,
    SandboxUnavailableError,
)
from gateway.sandbox.limits import ResourceLimits
from gateway.sandbox.machine import Choice, SandboxMachine
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.runners import (
    BwrapRunner,
    HostRunner,
    SandboxRunner,
    UidRunner,
    is_secret_name,
    scrub_env,
)
from gateway.sandbox.settings import SANDBOX_MODES, RiskTierName, SandboxMode, SandboxSettings

if TYPE_CHECKING:
    from gateway.sandbox.exec_mediation import Classification, classify
    from gateway.sandbox.layer import AuditCallback, sandbox_layer

_ON_FIRST_USE = {
    "Classification": "gateway.sandbox.exec_mediation",
    "classify": "gateway.sandbox.exec_mediation",
    "AuditCallback": "gateway.sandbox.layer",
    "sandbox_layer": "gateway.sandbox.layer",
}
"""Names this package exports from the modules it does not import up front."""

__getattr__ = exports_on_first_use(__name__, globals(), _ON_FIRST_USE)


__all__ = [
    "SANDBOX_MODES",
    "AuditCallback",
    "BwrapRunner",
    "Choice",
    "Classification",
    "CommandRefusedError",
    "HostRunner",
    "PathOutsideWorkspaceError",
    "ResourceLimits",
    "RiskTier",
    "RiskTierName",
    "SandboxError",
    "SandboxMachine",
    "SandboxMode",
    "SandboxRunner",
    "SandboxSettings",
    "SandboxUnavailableError",
    "UidRunner",
    "classify",
    "is_secret_name",
    "resolve_in_workspace",
    "sandbox_layer",
    "scrub_env",
]
