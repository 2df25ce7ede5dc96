"""Resource limits of one sandboxed command: how many processes, how much memory, CPU time, file
size and open files it may use. What enforces each one depends on the machine (`cgroups` when a
writable controller exists, otherwise per-process rlimits); docs/security.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True, kw_only=True)
class ResourceLimits:
    """Per-call limits; ``None`` leaves a resource unlimited. Raises `ValueError` naming the field
    when a value is not positive."""

    max_processes: int | None = 64
    """Processes (and threads) alive at once across everything the call starts."""
    memory_bytes: int | None = GIB
    """Memory of the whole call with a memory cgroup, else address space per process."""
    cpu_seconds: int | None = None
    """CPU time per process."""
    file_size_bytes: int | None = None
    """Largest file a process may write."""
    open_files: int | None = 1024
    """Open file descriptors per process."""

    def __post_init__(self) -> None:
        for name in ("max_processes", "memory_bytes", "cpu_seconds", "file_size_bytes", "open_files"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"sandbox {name} must be positive, got {value}")

    def rlimits(self, *, processes: bool, memory: bool) -> dict[str, int]:
        """The rlimits (``resource.RLIMIT_<name>`` names) that enforce these limits per process.
        `processes` and `memory` say whether RLIMIT_NPROC and RLIMIT_AS should carry the process
        and memory limits (they do not when a cgroup enforces them for the whole call)."""
        out: dict[str, int] = {}
        if processes and self.max_processes is not None:
            out["NPROC"] = self.max_processes
        if memory and self.memory_bytes is not None:
            out["AS"] = self.memory_bytes
        if self.cpu_seconds is not None:
            out["CPU"] = self.cpu_seconds
        if self.file_size_bytes is not None:
            out["FSIZE"] = self.file_size_bytes
        if self.open_files is not None:
            out["NOFILE"] = self.open_files
        return out

    def describe(self) -> dict[str, int | None]:
        return {
            "maxProcesses": self.max_processes,
            "memoryBytes": self.memory_bytes,
            "cpuSeconds": self.cpu_seconds,
            "fileSizeBytes": self.file_size_bytes,
            "openFiles": self.open_files,
        }
