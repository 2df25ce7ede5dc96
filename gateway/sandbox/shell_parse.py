"""A forgiving parser of shell command lines, for exec mediation.

It does not run or fully understand the shell; it recovers enough structure to judge a command:
lists (``;``, ``&&``, ``||``, ``&``, newlines), pipelines, subshells and brace groups, simple
commands with their assignments and redirections, and the command lines hidden in ``$(...)``,
backticks and process substitutions ``<(...)``. Words are split and unquoted with `shlex`, so
quoting tricks such as ``r''m`` or ``"/"`` come out as the shell would see them.

Where the parse is unsure it errs towards finding *more* commands (a quoted ``";"`` is read as a
separator, a heredoc body is read as commands): the classifier may then over-report, never hide.
Input is never rejected; an unterminated quote is closed for the parse.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_DEPTH = 6
"""How deep nested command lines (``bash -c "$(...)"`` inside ``eval``...) are followed."""
MAX_NESTING = 32
"""How deep ``( ... )`` groups and substitutions nest before the parser reads them flat."""

_OPERATORS = sorted(
    [
        "&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", ">>", ">&", "<&", "<>", ">|",
        "<<<", "<<-", "<<", "<(", ">(", "()", "(", ")", ";", "&", "|", "<", ">",
    ],
    key=len,
    reverse=True,
)  # fmt: skip
_PUNCTUATION = frozenset("();<>|&")
SEPARATORS = frozenset({";", "&&", "||", "&", ";;", ";&", ";;&"})
PIPES = frozenset({"|", "|&"})
REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<", "<>", ">&", "<&", "<<", "<<-", "<<<"})
WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_LEADING_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{"})
_CLOSING_KEYWORDS = frozenset({"fi", "done", "esac", "}"})
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.DOTALL)
_ANSI_C_ESCAPES = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|.)", re.DOTALL
)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
                   "f": "\f", "v": "\v"}  # fmt: skip


@dataclass
class SimpleCommand:
    """One command of a pipeline: its words (name first), what it redirects, and nested lines."""

    words: list[str] = field(default_factory=list)
    assignments: list[tuple[str, str]] = field(default_factory=list)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    substitutions: list[Script] = field(default_factory=list)
    """Command lines whose output or file descriptor this command consumes."""
    group: Script | None = None
    """Set for a ``( ... )`` subshell standing as a pipeline stage."""

    def is_empty(self) -> bool:
        return not (self.words or self.assignments or self.redirects or self.substitutions or self.group)

    def all_commands(self) -> Iterator[SimpleCommand]:
        """This command, then every command inside its group and substitutions."""
        yield self
        if self.group is not None:
            yield from self.group.all_commands()
        for sub in self.substitutions:
            yield from sub.all_commands()


@dataclass
class Pipeline:
    stages: list[SimpleCommand] = field(default_factory=list)


@dataclass
class Script:
    pipelines: list[Pipeline] = field(default_factory=list)

    def all_commands(self) -> Iterator[SimpleCommand]:
        for pipeline in self.pipelines:
            for stage in pipeline.stages:
                yield from stage.all_commands()


def decode_ansi_c(body: str) -> str:
    """The value of a ``$'...'`` string body."""

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        return _SIMPLE_ESCAPES.get(code, code)

    return _ANSI_C_ESCAPES.sub(replace, body)


def _closing(text: str, start: int, char: str) -> int:
    """Index of the next unescaped `char` at or after `start`, or -1."""
    index = start
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == char:
            return index
        index += 1
    return -1


def _skip_comment(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def _skip_fd_number(text: str, index: int) -> int:
    end = index
    while end < len(text) and text[end].isdigit():
        end += 1
    return end if end < len(text) and text[end] in "<>" else index


def _read_quoted(text: str, index: int) -> int:
    """End (exclusive) of the quoted string starting at `index`."""
    quote = text[index]
    close = text.find("'", index + 1) if quote == "'" else _closing(text, index + 1, '"')
    return len(text) if close < 0 else close + 1


def preprocess(text: str) -> str:
    """Normalise what `shlex` cannot see: newlines become ``;``, comments go, ``2>`` loses its fd
    number, ``$'...'`` is decoded and backticks become ``$(...)``. Quoted text is kept as is."""
    out: list[str] = []
    index = 0
    word_start = True
    while index < len(text):
        char = text[index]
        if char in "'\"":
            end = _read_quoted(text, index)
            out.append(text[index:end])
            index, word_start = end, False
            continue
        if char == "\\":
            if text.startswith("\\\n", index):
                index += 2
                continue
            out.append(text[index : index + 2])
            index, word_start = index + 2, False
            continue
        if text.startswith("$'", index):
            close = _closing(text, index + 2, "'")
            end = len(text) if close < 0 else close
            out.append(shlex.quote(decode_ansi_c(text[index + 2 : end])))
            index, word_start = end + 1, False
            continue
        if char == "`":
            close = _closing(text, index + 1, "`")
            end = len(text) if close < 0 else close
            out.append("$(" + text[index + 1 : end] + ")")
            index, word_start = end + 1, False
            continue
        if char == "\n":
            out.append(" ; ")
            index, word_start = index + 1, True
            continue
        if word_start and char == "#":
            index = _skip_comment(text, index)
            continue
        if word_start and char.isdigit():
            skipped = _skip_fd_number(text, index)
            if skipped != index:
                index = skipped
                continue
        out.append(char)
        word_start = char in " \t;&|()<>"
        index += 1
    return "".join(out)


def _split_operators(token: str) -> list[str]:
    parts: list[str] = []
    index = 0
    while index < len(token):
        for operator in _OPERATORS:
            if token.startswith(operator, index):
                parts.append(operator)
                index += len(operator)
                break
        else:  # pragma: no cover - every punctuation character is an operator prefix
            parts.append(token[index])
            index += 1
    return parts


def tokenize(text: str) -> list[str]:
    """Shell words and operators of `text` (already preprocessed)."""
    raw: list[str] | None = None
    for candidate in (text, text + "'", text + '"'):
        lexer = shlex.shlex(candidate, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            raw = list(lexer)
            break
        except ValueError:
            continue
    if raw is None:
        raw = text.split()
    tokens: list[str] = []
    for token in raw:
        if token and set(token) <= _PUNCTUATION:
            tokens.extend(_split_operators(token))
        else:
            tokens.append(token)
    return tokens


def word_substitutions(word: str) -> list[str]:
    """Bodies of the ``$(...)`` substitutions inside one word (quoted substitutions end up here)."""
    bodies: list[str] = []
    start = word.find("$(")
    while start >= 0:
        depth = 0
        for index in range(start + 1, len(word)):
            if word[index] == "(":
                depth += 1
            elif word[index] == ")":
                depth -= 1
                if depth == 0:
                    bodies.append(word[start + 2 : index])
                    start = word.find("$(", index + 1)
                    break
        else:
            bodies.append(word[start + 2 :])
            break
    return bodies


def _substituted_value(sub: Script) -> str:
    """What a substitution is replaced with: the text of a plain ``echo``, else a placeholder."""
    if len(sub.pipelines) == 1 and len(sub.pipelines[0].stages) == 1:
        words = sub.pipelines[0].stages[0].words
        if words and words[0] in ("echo", "printf") and not any(w.startswith(("-", "%")) for w in words[1:]):
            return " ".join(words[1:])
    return "$(...)"


class _Parser:
    def __init__(self, tokens: list[str], depth: int) -> None:
        self._tokens = tokens
        self._pos = 0
        self._depth = depth
        self._nesting = 0

    def _next(self) -> str | None:
        if self._pos >= len(self._tokens):
            return None
        token = self._tokens[self._pos]
        self._pos += 1
        return token

    def _peek(self) -> str | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _nested(self) -> Script:
        """The list up to the matching ``)``; past `MAX_NESTING` the rest is read flat."""
        if self._nesting >= MAX_NESTING:
            return Script()
        self._nesting += 1
        try:
            return self.parse_list(")")
        finally:
            self._nesting -= 1

    def parse_list(self, closer: str | None) -> Script:
        script = Script()
        pipeline = Pipeline()
        command = SimpleCommand()
        while (token := self._next()) is not None:
            if token == closer:
                break
            if token in PIPES or token in SEPARATORS or (token == ")" and closer is None):
                if not command.is_empty():
                    pipeline.stages.append(command)
                command = SimpleCommand()
                if token not in PIPES and pipeline.stages:
                    script.pipelines.append(pipeline)
                    pipeline = Pipeline()
                continue
            self._command_token(token, command)
        if not command.is_empty():
            pipeline.stages.append(command)
        if pipeline.stages:
            script.pipelines.append(pipeline)
        return script

    def _command_token(self, token: str, command: SimpleCommand) -> None:
        if token in REDIRECTS:
            target = self._next() or ""
            if target in ("<(", ">("):
                command.substitutions.append(self._nested())
                target = "/dev/fd/63"
            command.redirects.append((token, target))
        elif token in ("<(", ">("):
            command.substitutions.append(self._nested())
            command.words.append("/dev/fd/63")
        elif token == "(":
            group = self._nested()
            if command.group is None and not command.words:
                command.group = group
            else:
                command.substitutions.append(group)
        elif token == "()":
            command.words.clear()  # `name()` starts a function definition, not a call
        elif token.endswith("$") and self._peek() == "(":
            self._next()
            sub = self._nested()
            command.substitutions.append(sub)
            command.words.append(token[:-1] + _substituted_value(sub))
        else:
            self._word(token, command)

    def _word(self, token: str, command: SimpleCommand) -> None:
        if not command.words and command.group is None:
            if token in _LEADING_KEYWORDS or token in _CLOSING_KEYWORDS:
                return
            assignment = _ASSIGNMENT.match(token)
            if assignment:
                command.assignments.append((assignment.group(1), assignment.group(3)))
                return
        if self._depth < MAX_DEPTH and ("$(" in token):
            for body in word_substitutions(token):
                sub = parse(body, depth=self._depth + 1)
                command.substitutions.append(sub)
                value = _substituted_value(sub)
                if value != "$(...)":
                    token = token.replace(f"$({body})", value, 1)
        command.words.append(token)


def parse(text: str, *, depth: int = 0) -> Script:
    """Parse a command line. Never raises; unknown syntax degrades to plain words."""
    return _Parser(tokenize(preprocess(text)), depth).parse_list(None)
