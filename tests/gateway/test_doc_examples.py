"""The config examples in the README and the channel guide are valid configs: each TOML block
loads, and its bindings pass the same check `gatewayd` runs before it starts."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gateway.channel_config import validate_bindings
from gateway.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "channels.md"]


class AnySecret(Mapping[str, str]):
    """An environment in which every variable a binding names is set."""

    def __getitem__(self, key: str) -> str:
        return "secret-value"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for doc in DOCS:
        for index, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S)):
            blocks.append((f"{doc.name}#{index}", block))
    return blocks


def test_the_docs_have_binding_examples() -> None:
    assert sum("[bindings." in block for _, block in toml_blocks()) >= 2


@pytest.mark.parametrize(("where", "block"), toml_blocks(), ids=[w for w, _ in toml_blocks()])
def test_each_config_example_is_valid(where: str, block: str, tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(block)
    config = load_config(path, env={})
    validate_bindings(config, env=AnySecret())
