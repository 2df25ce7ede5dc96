"""`release_large_blocks` fixes glibc's mmap threshold, without starting a program to find libc."""

from __future__ import annotations

import platform
import subprocess
from typing import Any

import pytest

from gateway.allocator import release_large_blocks

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


@glibc
def test_the_threshold_is_set_without_starting_a_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert release_large_blocks() is True
