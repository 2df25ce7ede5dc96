"""Finding extensions reads metadata and file names only: nothing found is imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.extensions.discovery import discover, extensions_present
from tests.gateway.extensions.support import DIST


def test_entry_points_and_home_files_are_found_without_importing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    monkeypatch.setenv("HELLO_EXT_IMPORTED", str(marker))
    monkeypatch.syspath_prepend(str(DIST))
    home = tmp_path / "home"
    (home / "extensions" / "audit").mkdir(parents=True)
    (home / "extensions" / "audit" / "__init__.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('x')\n"
    )
    (home / "extensions" / "shout.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('x')\n"
    )
    (home / "extensions" / "_private.py").write_text("")
    (home / "extensions" / "notes.txt").write_text("")
    found = discover(home)
    by_name = {item.name: item for item in found.found}
    assert set(by_name) == {"audit", "hello", "shout"}
    hello = by_name["hello"]
    assert (hello.kind, hello.target, hello.distribution, hello.version) == (
        "entry-point",
        "hello_gateway_ext:register",
        "hello-gateway-ext",
        "0.1.0",
    )
    assert hello.origin == "entry point hello = hello_gateway_ext:register (hello-gateway-ext)"
    assert by_name["shout"].origin == f"file {home / 'extensions' / 'shout.py'}"
    assert by_name["audit"].target == str(home / "extensions" / "audit" / "__init__.py")
    assert not marker.exists()
    assert "hello_gateway_ext" not in sys.modules
    assert extensions_present(home)


def test_bad_names_and_a_name_found_twice_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(DIST))
    home = tmp_path / "home"
    (home / "extensions").mkdir(parents=True)
    (home / "extensions" / "hello.py").write_text("")
    (home / "extensions" / "Bad Name.py").write_text("")
    found = discover(home)
    assert [item.name for item in found.found] == ["hello"]
    assert found.found[0].kind == "entry-point"
    assert any("hello" in problem and "ignored" in problem for problem in found.problems)
    assert any("Bad Name.py ignored" in problem for problem in found.problems)


def test_nothing_to_find(tmp_path: Path) -> None:
    assert discover(tmp_path).found == ()
    assert not extensions_present(tmp_path)
