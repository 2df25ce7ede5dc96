from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.sandbox import PathOutsideWorkspaceError, resolve_in_workspace


def test_relative_paths_resolve_inside(workspace: Path) -> None:
    root = workspace.resolve()
    assert resolve_in_workspace(workspace, "a.txt") == root / "a.txt"
    assert resolve_in_workspace(workspace, "sub/../a.txt") == root / "a.txt"
    assert resolve_in_workspace(workspace, ".") == root
    assert resolve_in_workspace(workspace, "") == root
    assert resolve_in_workspace(workspace, "new/dir/file.txt") == root / "new/dir/file.txt"
    assert resolve_in_workspace(workspace, str(root / "sub")) == root / "sub"


def test_symlinks_that_stay_inside_are_followed(workspace: Path) -> None:
    (workspace / "alias.txt").symlink_to("a.txt")
    (workspace / "subalias").symlink_to(workspace / "sub")
    assert resolve_in_workspace(workspace, "alias.txt") == workspace.resolve() / "a.txt"
    assert resolve_in_workspace(workspace, "subalias/x") == workspace.resolve() / "sub" / "x"


def test_workspace_reached_through_a_symlink(tmp_path: Path, workspace: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    assert resolve_in_workspace(link, "a.txt") == workspace.resolve() / "a.txt"


@pytest.mark.parametrize(
    "path", ["..", "../outside/secret.txt", "sub/../../outside", "~", "~/x", "/etc/passwd"]
)
def test_escapes_are_refused(workspace: Path, outside: Path, path: str) -> None:
    with pytest.raises(PathOutsideWorkspaceError, match="outside the workspace"):
        resolve_in_workspace(workspace, path)


def test_absolute_path_elsewhere_is_refused(workspace: Path, outside: Path) -> None:
    with pytest.raises(PathOutsideWorkspaceError, match=r"secret\.txt.*outside the workspace"):
        resolve_in_workspace(workspace, str(outside / "secret.txt"))


def test_sibling_with_a_common_prefix_is_outside(tmp_path: Path, workspace: Path) -> None:
    sibling = tmp_path / "ws-evil"
    sibling.mkdir()
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(workspace, str(sibling))


def test_file_symlink_pointing_outside_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutsideWorkspaceError, match=r"leak\.txt"):
        resolve_in_workspace(workspace, "leak.txt")


def test_directory_symlink_on_the_way_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "sub" / "door").symlink_to(outside)
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(workspace, "sub/door/secret.txt")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(workspace, "sub/door/not-yet-created.txt")


def test_dangling_symlink_pointing_outside_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "trap.txt").symlink_to(outside / "would-be-created.txt")
    (workspace / "reltrap").symlink_to(os.path.join("..", "outside", "x.txt"))
    for name in ("trap.txt", "reltrap"):
        with pytest.raises(PathOutsideWorkspaceError):
            resolve_in_workspace(workspace, name)


def test_symlink_loop_is_refused(workspace: Path) -> None:
    (workspace / "loop1").symlink_to(workspace / "loop2")
    (workspace / "loop2").symlink_to(workspace / "loop1")
    with pytest.raises(PathOutsideWorkspaceError):
        resolve_in_workspace(workspace, "loop1/x")
