"""Settings of the sandbox layer for one session's tool pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from agent_core.tools import DEFAULT_OUTPUT_CAP_BYTES
from gateway.sandbox.risk import RiskTier

SandboxMode: TypeAlias = Literal["auto", "bwrap", "confined", "subprocess", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "confined", "subprocess", "off")
RiskTierName: TypeAlias = Literal["low", "medium", "high", "critical"]

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True, kw_only=True)
class SandboxSettings:
    """How `bash` runs and which commands are refused.

    mode: ``"auto"`` uses bubblewrap when it works here, else the confined subprocess;
    ``"bwrap"`` requires bubblewrap (bash refuses to run without it rather than run weaker);
    ``"confined"`` (alias ``"subprocess"``, normalised to ``"confined"``) always uses the
    confined subprocess; ``"off"`` runs commands unconfined on this machine. File tools are
    confined to the workspace and exec mediation applies in every mode.
    deny_threshold: commands classified at or above it are refused; ``None`` refuses nothing
    (classified commands are still audited). A tier name such as ``"high"`` is accepted and
    normalised to `RiskTier`.
    timeout_s: the longest any command may run (a shorter per-call timeout still applies).
    output_cap_bytes: how much of a command's output is kept in memory (the tail).
    allowed_env: environment variable names (or globs like ``LC_*``) passed to commands in
    addition to PATH, LANG, TERM and HOME (the workspace).
    Raises `ValueError` naming the field when a value is invalid.
    """

    workspace: Path
    mode: SandboxMode = "auto"
    deny_threshold: RiskTier | RiskTierName | None = RiskTier.HIGH
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    allowed_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
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
        object.__setattr__(self, "mode", "confined" if self.mode == "subprocess" else self.mode)
        object.__setattr__(self, "workspace", Path(self.workspace))
        object.__setattr__(self, "allowed_env", tuple(self.allowed_env))

    @property
    def threshold(self) -> RiskTier | None:
        """`deny_threshold` as a `RiskTier` (``__post_init__`` has normalised it)."""
        value = self.deny_threshold
        return None if value is None else RiskTier.parse(value)
