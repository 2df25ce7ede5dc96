"""Settings of the sandbox layer for one session's tool pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from agent_core.tools import DEFAULT_OUTPUT_CAP_BYTES
from gateway.sandbox.limits import ResourceLimits
from gateway.sandbox.risk import RiskTier

SandboxMode: TypeAlias = Literal["auto", "bwrap", "uid", "unsafe-host"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "uid", "unsafe-host")
RiskTierName: TypeAlias = Literal["low", "medium", "high", "critical"]
RETIRED_MODES = {
    "subprocess": "it ran commands unconfined",
    "confined": "it ran commands unconfined",
    "off": "it ran commands unconfined",
}
"""Mode names of earlier versions, refused with this explanation rather than guessed."""

DEFAULT_TIMEOUT_S = 600.0


def retired_mode_message(mode: str) -> str:
    return (
        f"sandbox mode {mode!r} no longer exists ({RETIRED_MODES[mode]}); use 'auto' for the "
        "strongest confinement that works here, or 'unsafe-host' to run commands unconfined"
    )


@dataclass(frozen=True, kw_only=True)
class SandboxSettings:
    """How `bash` runs and which commands are refused.

    mode: ``"auto"`` uses the strongest confining runner that works here (bubblewrap, else a
    one-off unprivileged user when the daemon runs as root) and refuses to run commands when
    none works; ``"bwrap"`` and ``"uid"`` require that runner; ``"unsafe-host"`` runs commands
    unconfined as the daemon's user. File tools are confined to the workspace and exec mediation
    applies in every mode.
    deny_threshold: commands classified at or above it are refused; ``None`` refuses nothing
    (classified commands are still audited). A tier name such as ``"high"`` is accepted and
    normalised to `RiskTier`.
    timeout_s: the longest any command may run (a shorter per-call timeout still applies).
    output_cap_bytes: how much of a command's output is kept in memory (the tail).
    allowed_env: environment variable names (or globs like ``LC_*``) passed to commands in
    addition to PATH, LANG, TERM and HOME (the workspace).
    limits: per-call resource limits.
    read_roots: see the field.
    Raises `ValueError` naming the field when a value is invalid.
    """

    workspace: Path
    mode: SandboxMode = "auto"
    deny_threshold: RiskTier | RiskTierName | None = RiskTier.HIGH
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    allowed_env: tuple[str, ...] = ()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    read_roots: tuple[Path, ...] = ()
    """Directories outside the workspace that the reading file tools (`read`, `grep`, `find`,
    `ls`) may also read, by absolute path: the agent's skill folders. Never written."""

    def __post_init__(self) -> None:
        if self.mode in RETIRED_MODES:
            raise ValueError(retired_mode_message(self.mode))
        if self.mode not in SANDBOX_MODES:
            raise ValueError(f"sandbox mode must be one of {', '.join(SANDBOX_MODES)}, got {self.mode!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"sandbox timeout_s must be positive, got {self.timeout_s}")
        if self.output_cap_bytes <= 0:
            raise ValueError(f"sandbox output_cap_bytes must be positive, got {self.output_cap_bytes}")
        threshold = self.deny_threshold
        if threshold is not None:
            try:
                threshold = RiskTier.parse(threshold)
            except ValueError as exc:
                raise ValueError(f"sandbox deny_threshold: {exc}") from None
            if threshold is RiskTier.NONE:
                raise ValueError("sandbox deny_threshold cannot be none (it would refuse every command)")
        object.__setattr__(self, "deny_threshold", threshold)
        object.__setattr__(self, "workspace", Path(self.workspace))
        object.__setattr__(self, "allowed_env", tuple(self.allowed_env))
        object.__setattr__(self, "read_roots", tuple(Path(root) for root in self.read_roots))

    @property
    def threshold(self) -> RiskTier | None:
        """`deny_threshold` as a `RiskTier` (``__post_init__`` has normalised it)."""
        value = self.deny_threshold
        return None if value is None else RiskTier.parse(value)
