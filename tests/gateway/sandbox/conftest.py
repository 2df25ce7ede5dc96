"""Fixtures of the sandbox tests: a workspace with a sibling directory outside it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workspace(open_tmp: Path) -> Path:
    root = open_tmp / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory holding a secret the sandbox must not reach (closed to other users, as a
    home directory is)."""
    root = tmp_path / "outside"
    root.mkdir()
    (root / "secret.txt").write_text("TOP SECRET\n")
    return root


@pytest.fixture
def open_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary directory whose ancestors other users may traverse (pytest's are 0700), for
    the uid runner's one-off users."""
    root = Path(tempfile.mkdtemp(prefix="gateway-sandbox-", dir="/tmp"))
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
