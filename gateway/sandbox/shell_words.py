"""Shell words as exec mediation sees them: the value a word has once the shell has removed its
quotes, and whether part of that value is known only when the command runs.

Pure functions over text; `shell_syntax` builds `Word`s from the syntax tree with them.
"""

from __future__ import annotations

import re

import msgspec

_ANSI_C_ESCAPES = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
                   "f": "\f", "v": "\v"}  # fmt: skip
_DOUBLE_QUOTE_ESCAPES = re.compile(r"\\([$`\"\\\n])")
_BARE_ESCAPES = re.compile(r"\\(.)", re.DOTALL)


class Word(msgspec.Struct, frozen=True, dict=True):
    """One word of a command after quote removal.

    `text` is the value; a part known only at run time keeps its shell spelling (``$HOME``,
    ``${x}``, ``$(...)``), so path rules can still tell ``$HOME/x`` from ``x``.
    """

    text: str
    dynamic: bool = False
    """Part of the value is known only at run time (a variable, a substitution, arithmetic)."""
    substituted: bool = False
    """Part of the value is the output of a command substitution (``$(...)``, backticks)."""
    process: bool = False
    """The word is a process substitution (``<(...)``, ``>(...)``): a file another command feeds."""

    def join(self, other: Word) -> Word:
        return Word(
            self.text + other.text,
            dynamic=self.dynamic or other.dynamic,
            substituted=self.substituted or other.substituted,
            process=self.process or other.process,
        )


EMPTY = Word("")


def concat(words: list[Word]) -> Word:
    result = EMPTY
    for word in words:
        result = result.join(word)
    return result


def decode_ansi_c(body: str) -> str:
    """The value of a ``$'...'`` string body (without the ``$'`` and ``'``)."""

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            return chr(min(int(code[1:], 16), 0x10FFFF))
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        if code[0] == "c" and len(code) == 2:
            return chr(ord(code[1]) & 0x1F)
        return _SIMPLE_ESCAPES.get(code, code if code in "\\'\"?" else "\\" + code)

    return _ANSI_C_ESCAPES.sub(replace, body)


def unescape_bare(text: str) -> str:
    """An unquoted word's value: a backslash quotes the next character, backslash-newline vanishes."""
    if "\\" not in text:
        return text
    return _BARE_ESCAPES.sub(lambda match: "" if match.group(1) == "\n" else match.group(1), text)


def unescape_double_quoted(text: str) -> str:
    """Literal text inside ``"..."``: a backslash quotes only ``$ ` " \\`` and newline."""
    if "\\" not in text:
        return text
    return _DOUBLE_QUOTE_ESCAPES.sub(lambda match: "" if match.group(1) == "\n" else match.group(1), text)
