"""Parsing a command line with the tree-sitter-bash grammar, for `shell_syntax`: each thread's
parser, the bytes the grammar is given, the time a parse may take, and the text of a node read
back from the line's own bytes.

The grammar is loaded by the first command parsed, not at import. `parse` gives up (None) on a
line whose parse takes longer than `PARSE_BUDGET_S` (pathological error recovery); `reading`
makes a line's bytes the source that `node_text` reads while its tree is walked.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

PARSE_BUDGET_S = 1.0
_CHUNK = 64 * 1024
_local = threading.local()


def _parser() -> Parser:
    """This thread's parser. The grammar is loaded by the first command read (8 ms and 2.5 MB that
    a daemon whose runs never call bash does not spend)."""
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        import tree_sitter_bash
        from tree_sitter import Language, Parser

        parser = Parser(Language(tree_sitter_bash.language()))
        _local.parser = parser
    return parser


def snippet(node: Node) -> str:
    """The text of the node, shortened to 60 characters."""
    text = node_text(node).strip()
    return text if len(text) <= 60 else text[:57] + "..."


def node_text(node: Node) -> str:
    """The text of the node, from the line being read (`reading`) when there is one."""
    source: bytes | None = getattr(_local, "source", None)
    raw = source[node.start_byte : node.end_byte] if source is not None else (node.text or b"")
    return raw.decode("utf-8", errors="replace")


_HIGH_BYTE = re.compile(rb"[\x80-\xff]")


def grammar_bytes(data: bytes) -> bytes:
    """What the grammar parses: `data` with every byte of a non-ASCII character replaced by
    ``x``, so byte offsets are unchanged.

    The bash grammar's scanner is C code, and some non-ASCII input crashes it (``{`` followed by
    certain supplementary-plane characters at the end of the line ends the process with a
    segmentation fault). Bash treats every non-ASCII byte as an ordinary word character, so an
    ASCII letter in its place gives the same tree; ``x`` appears in no reserved word, so no
    replacement can make one. Words are read back from the original bytes (`node_text`).
    """
    return _HIGH_BYTE.sub(b"x", data)


def parse(data: bytes) -> Node | None:
    """The root of the syntax tree of `data` (parsed as `grammar_bytes` gives it), or None when
    parsing it would take more than `PARSE_BUDGET_S`."""
    parsed = grammar_bytes(data)
    parser = _parser()
    deadline = time.monotonic() + PARSE_BUDGET_S

    def chunk(offset: int, _point: object) -> bytes:
        return parsed[offset : offset + _CHUNK]

    def out_of_time(_offset: int, _has_error: bool) -> bool:
        return time.monotonic() > deadline

    try:
        tree = parser.parse(chunk, progress_callback=out_of_time)
    except ValueError:  # cancelled by the budget
        parser.reset()
        return None
    return tree.root_node


@contextmanager
def reading(data: bytes) -> Iterator[None]:
    """While the tree of `data` is walked, `node_text` reads from `data` itself."""
    _local.source = data
    try:
        yield
    finally:
        _local.source = None


_EXPANSIONS = frozenset({"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
                         "process_substitution"})  # fmt: skip


def has_expansion(node: Node) -> bool:
    """Whether an expansion or a substitution appears anywhere under `node`."""
    return any(inner.type in _EXPANSIONS for inner in walk(node))


def first_error(root: Node, repaired: set[int]) -> str | None:
    """The first part of the tree the grammar could not parse (other than the `repaired` nodes)."""
    for node in walk(root):
        if (node.is_error or node.is_missing) and node.id not in repaired:
            return snippet(node) or f"missing {node.type}"
    return None


def walk(node: Node) -> Iterator[Node]:
    """Every node under `node`, itself first, in document order."""
    cursor = node.walk()
    while True:
        current = cursor.node
        if current is not None:
            yield current
        if cursor.goto_first_child() or cursor.goto_next_sibling():
            continue
        while cursor.goto_parent():
            if cursor.goto_next_sibling():
                break
        else:
            return
