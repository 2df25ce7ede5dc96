"""Fixtures of the sandbox tests: a workspace with a sibling directory outside it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret the sandbox must not reach."""
    root = tmp_path / "outside"
    root.mkdir()
    (root / "secret.txt").write_text("TOP SECRET\n")
    return root
