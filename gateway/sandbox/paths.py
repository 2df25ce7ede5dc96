"""Path confinement: a path argument must resolve inside the workspace.

Resolution follows every symlink the kernel would follow, dangling ones included (their target
is where a write would land), so a link anywhere on the way that points outside is refused. The
check is made when the call starts; a process racing to swap a directory for a symlink between
the check and the use is out of its reach (the bash runner confines such processes instead).
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.sandbox.errors import PathOutsideWorkspaceError


def resolve_in_workspace(workspace: Path, path: str | os.PathLike[str]) -> Path:
    """The fully resolved absolute form of `path` (relative paths start at `workspace`).

    Raises `PathOutsideWorkspaceError` when it lands outside the workspace: ``..`` climbing out,
    an absolute path elsewhere, ``~``, or a symlink (file, directory, dangling) leading out.
    """
    root = Path(workspace).resolve()
    text = os.fspath(path).strip() or "."
    if text == "~" or text.startswith("~/"):
        text = os.path.expanduser(text)
    candidate = Path(text)
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise PathOutsideWorkspaceError(
            f"Path {os.fspath(path)!r} cannot be resolved ({exc}); use a plain path inside the workspace"
        ) from None
    if resolved != root and root not in resolved.parents:
        raise PathOutsideWorkspaceError(
            f"Path {os.fspath(path)!r} resolves to {resolved}, outside the workspace {root}; "
            "use a path inside the workspace"
        )
    return resolved


def is_within(workspace: Path, path: Path) -> bool:
    """Whether `path` resolves inside `workspace` (never raises)."""
    try:
        resolve_in_workspace(workspace, path)
    except PathOutsideWorkspaceError:
        return False
    return True
