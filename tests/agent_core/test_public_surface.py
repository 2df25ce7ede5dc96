"""The engine's public surface: the layers above it import only public names.

Everything in `agent_core` whose module path has a part starting with ``_`` is private (STYLE 6);
`sessions`, `gateway` and `bindings` must import what they need from the public modules, which
`agent_core/__init__.py` names in `__all__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent_core

ROOT = Path(__file__).resolve().parents[2]
LAYERS_ABOVE = ("sessions", "gateway", "bindings")


def _imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def _is_private_engine_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "agent_core" and any(part.startswith("_") for part in parts[1:])


def test_the_layers_above_import_no_private_engine_module() -> None:
    offenders = []
    for layer in LAYERS_ABOVE:
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name in _imported_modules(tree):
                if _is_private_engine_module(name):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_every_public_name_is_importable_from_the_package() -> None:
    missing = [name for name in agent_core.__all__ if not hasattr(agent_core, name)]
    assert missing == []
