"""The sandbox layer of the gateway's tool pipeline.

File tools are confined to the session's workspace (symlinks included), every shell command
passes exec mediation (a classifier of dangerous commands with risk tiers, a deny threshold and
an audit trail), and `bash` runs under bubblewrap, in a confined subprocess, or unconfined,
as the settings say.
"""

from gateway.sandbox.errors import (
    CommandRefusedError,
    PathOutsideWorkspaceError,
    SandboxError,
    SandboxUnavailableError,
)
from gateway.sandbox.exec_mediation import Classification, classify
from gateway.sandbox.layer import AuditCallback, sandbox_layer, select_runner
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.runners import BwrapRunner, ConfinedRunner, bwrap_available, is_secret_name, scrub_env
from gateway.sandbox.settings import SANDBOX_MODES, RiskTierName, SandboxMode, SandboxSettings

__all__ = [
    "SANDBOX_MODES",
    "AuditCallback",
    "BwrapRunner",
    "Classification",
    "CommandRefusedError",
    "ConfinedRunner",
    "PathOutsideWorkspaceError",
    "RiskTier",
    "RiskTierName",
    "SandboxError",
    "SandboxMode",
    "SandboxSettings",
    "SandboxUnavailableError",
    "bwrap_available",
    "classify",
    "is_secret_name",
    "resolve_in_workspace",
    "sandbox_layer",
    "scrub_env",
    "select_runner",
]
