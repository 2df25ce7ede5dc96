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


# --- links and the offline model's directives -------------------------------------------------

LINKED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """The fragment a Markdown renderer gives a heading: lower case, punctuation dropped, spaces
    as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in doc.read_text().splitlines() if line.startswith("#")}


@pytest.mark.parametrize("doc", LINKED, ids=[d.name for d in LINKED])
def test_links_between_the_docs_resolve(doc: Path) -> None:
    for target in _LINK.findall(doc.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, fragment = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name} links to {target}, which does not exist"
        if fragment and file.suffix == ".md":
            assert fragment in anchors(file), (
                f"{doc.name} links to #{fragment}, no such heading in {file.name}"
            )


def test_the_readme_documents_every_directive_of_the_offline_model() -> None:
    from agent_core.providers import faux_echo as faux

    section = (ROOT / "README.md").read_text().split("## Trying it without a model key", 1)[1]
    section = section.split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `!(\w+)", section, re.M))
    assert documented == set(re.findall(r"``!(\w+)", faux.__doc__ or ""))
    assert f"{faux.DEFAULT_PACE_MS:g} ms per word" in section and faux.PACE_ENV in section
