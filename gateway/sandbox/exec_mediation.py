"""Exec mediation: classify a shell command line by how dangerous it could be.

`classify(command)` parses the line (`shell_parse`), strips wrappers that only change how a
command runs (``sudo``, ``env``, ``nohup``, ``timeout`` ...), follows nested command lines
(``bash -c``, ``eval``, ``$(...)``, ``<(...)``, ``find -exec``), and applies the rules of
`exec_rules` to every command found. The result names the highest risk tier, every danger class
seen, and a readable reason. Classification is static and best effort: it catches the usual
spellings and the common obfuscations, and leans towards reporting when unsure, but it is one
layer of defence, not a proof (the sandbox runner is the other).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass, field

from gateway.sandbox.danger_targets import DOWNLOADERS, NETWORK_TOOLS, SHELLS, SOURCING, is_interpreter
from gateway.sandbox.exec_rules import (
    OBFUSCATED,
    PIPE_TO_SHELL,
    PRIVILEGE,
    REVERSE_SHELL,
    credential_rules,
    redirect_rules,
    rule_for,
    text_rules,
)
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.shell_parse import MAX_DEPTH, Pipeline, Script, SimpleCommand, parse

__all__ = ["Classification", "RiskTier", "classify"]

_PRIVILEGED = frozenset({"sudo", "doas", "pkexec", "runuser", "su"})
_WRAPPER_ARGS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group",
                       "--chdir", "--host", "--prompt", "--role", "--type", "--other-user", "--close-from"}),
    "doas": frozenset({"-u", "-C"}),
    "pkexec": frozenset({"--user"}),
    "runuser": frozenset({"-u", "-g", "-G", "--user", "--group"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "xargs": frozenset({"-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "--max-args", "--max-procs",
                        "--delimiter", "--arg-file", "--replace", "--max-lines", "--eof"}),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "chroot": frozenset({"--userspec", "--groups"}),
    "flock": frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(), "command": frozenset(), "builtin": frozenset(), "setsid": frozenset(),
    "unbuffer": frozenset(), "busybox": frozenset(), "caffeinate": frozenset(), "chronic": frozenset(),
}  # fmt: skip
_DECLARATIONS = frozenset({"export", "declare", "local", "readonly", "typeset"})
_WRAPPER_POSITIONALS = {"timeout": 1, "chroot": 1, "flock": 1}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_DECODERS = re.compile(r"^(?:base64|base32|xxd|openssl|gunzip|zcat|gzip|bzip2|xz|uudecode|rev)$")


MAX_COMMAND_CHARS = 100_000
"""Longer command lines are refused unread: analysing them costs too much, and skipping part of
one would let padding hide a dangerous command."""
OVERSIZED = "oversized_command"


@dataclass(frozen=True)
class Classification:
    """The verdict on one command line. `classes` lists danger classes, most serious first."""

    risk: RiskTier
    classes: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass(frozen=True)
class _Finding:
    risk: RiskTier
    danger_class: str
    reason: str


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word and not word.endswith("/") else word


class _Analyzer:
    """Collects findings over one command line and the lines nested in it."""

    def __init__(self) -> None:
        self._findings: dict[_Finding, None] = {}
        self._variables: dict[str, str] = {}
        self._depth = 0

    # FindingSink
    def add(self, risk: RiskTier, danger_class: str, reason: str) -> None:
        self._findings[_Finding(risk, danger_class, reason)] = None

    @property
    def findings(self) -> list[_Finding]:
        return list(self._findings)

    def analyze_text(self, text: str) -> None:
        if self._depth > MAX_DEPTH or not text.strip():
            return
        self._depth += 1
        try:
            text_rules(self, text)
            self._script(parse(text, depth=self._depth))
        finally:
            self._depth -= 1

    def analyze_words(self, words: list[str]) -> None:
        if self._depth > MAX_DEPTH:
            return
        self._depth += 1
        try:
            self._command(SimpleCommand(words=list(words)))
        finally:
            self._depth -= 1

    # walking the parse
    def _script(self, script: Script) -> None:
        for pipeline in script.pipelines:
            for stage in pipeline.stages:
                self._command(stage)
            if len(pipeline.stages) > 1:
                self._pipeline(pipeline)

    def _command(self, command: SimpleCommand) -> None:
        if command.group is not None:
            self._script(command.group)
        for sub in command.substitutions:
            self._script(sub)
        words = self._expand(command.words)
        if not words:
            # A bare assignment sets a shell variable that later words may use.
            self._variables.update(command.assignments)
        elif words[0] in _DECLARATIONS:
            for word in words[1:]:
                name, equals, value = word.partition("=")
                if equals and _ASSIGNMENT.match(word):
                    self._variables[name] = value
        redirect_rules(self, words, [(op, self._expand_word(target)) for op, target in command.redirects])
        credential_rules(self, words)
        resolved = self._strip_wrappers(words)
        if resolved is None:
            return
        name, args = _basename(resolved[0]), resolved[1:]
        runs_code = name in SHELLS | SOURCING or is_interpreter(name)
        if runs_code and any(_runs_download(sub) for sub in command.substitutions):
            self.add(RiskTier.HIGH, PIPE_TO_SHELL, f"{name} runs a script fetched from the network")
        rule = rule_for(name)
        if rule is not None:
            rule(self, name, args)

    def _expand_word(self, word: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            return self._variables.get(name, match.group(0))

        return _VARIABLE.sub(value, word) if "$" in word and self._variables else word

    def _expand(self, words: list[str]) -> list[str]:
        expanded: list[str] = []
        for word in words:
            value = self._expand_word(word)
            if value != word and _VARIABLE.fullmatch(word) and " " in value.strip():
                expanded.extend(value.split())  # an unquoted variable splits into words
            else:
                expanded.append(value)
        return expanded

    def _strip_wrappers(self, words: list[str]) -> list[str] | None:
        """The command a wrapper chain finally runs, or ``None`` when it runs nothing."""
        while words:
            name = _basename(words[0])
            if name not in _WRAPPER_ARGS:
                return words
            if name in _PRIVILEGED:
                self.add(RiskTier.LOW, PRIVILEGE, f"runs a command through {name}")
            if name == "su":
                return words
            if name == "command" and any(arg in ("-v", "-V") for arg in words[1:2]):
                return None
            rest = self._skip_wrapper_options(name, words[1:])
            if rest is None:
                return None
            words = rest
        return None

    def _skip_wrapper_options(self, name: str, args: list[str]) -> list[str] | None:
        takes_value = _WRAPPER_ARGS[name]
        index = 0
        while index < len(args):
            arg = args[index]
            if arg == "--":
                index += 1
                break
            if name == "env" and _ASSIGNMENT.match(arg):
                index += 1
                continue
            if name == "env" and (
                arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string="))
            ):
                inline = arg[2:] if arg.startswith("-S") else arg.partition("=")[2]
                value = inline or (args[index + 1] if index + 1 < len(args) else "")
                rest = args[index + (1 if inline else 2) :]
                return [*shlex.split(value, comments=False), *rest] if value else rest
            if not (arg.startswith("-") and len(arg) > 1):
                break
            index += 2 if arg in takes_value else 1
        index += _WRAPPER_POSITIONALS.get(name, 0)
        return args[index:] if index < len(args) else None

    def _pipeline(self, pipeline: Pipeline) -> None:
        stages = [self._strip_wrappers(self._expand(stage.words)) or [] for stage in pipeline.stages]
        names = [_basename(words[0]) if words else "" for words in stages]
        inner = [
            {_basename(cmd.words[0]) for cmd in stage.all_commands() if cmd.words}
            for stage in pipeline.stages
        ]
        for index, words in enumerate(stages):
            if not words or not _reads_program_from_stdin(names[index], words[1:]):
                continue
            upstream = set().union(*inner[:index]) if index else set()
            if upstream & DOWNLOADERS:
                self.add(RiskTier.HIGH, PIPE_TO_SHELL, f"pipes a download into {names[index]}")
            elif index:
                self._piped_text(stages[:index], names[index])
        if any(names[i] in SHELLS for i in range(len(names))) and set(names) & NETWORK_TOOLS:
            self.add(RiskTier.HIGH, REVERSE_SHELL, "pipes a network connection through a shell")

    def _piped_text(self, upstream: list[list[str]], runner: str) -> None:
        """``echo ... | sh`` runs the echoed text; decode it first if a decoder sits in between."""
        first = upstream[0]
        if not first or _basename(first[0]) not in ("echo", "printf"):
            return
        text = " ".join(arg for arg in first[1:] if not re.fullmatch(r"-[neE]+", arg))
        if any(_DECODERS.match(_basename(words[0])) for words in upstream[1:] if words):
            self.add(RiskTier.MEDIUM, OBFUSCATED, f"decodes hidden text and runs it with {runner}")
            text = _try_base64(text) or ""
        self.analyze_text(text)


def _runs_download(script: Script) -> bool:
    return any(cmd.words and _basename(cmd.words[0]) in DOWNLOADERS for cmd in script.all_commands())


def _reads_program_from_stdin(name: str, args: list[str]) -> bool:
    """Whether a shell or interpreter takes its program from standard input."""
    if name not in SHELLS and not is_interpreter(name):
        return False
    code_flags = ("-c",) if name in SHELLS else ("-c", "-e", "-E", "-r", "-m", "--eval", "-p")
    for arg in args:
        if arg in ("-s", "-"):
            return True
        if arg in code_flags or (name in SHELLS and arg.startswith("-") and "c" in arg[1:] and arg[1] != "-"):
            return False
        if not arg.startswith(("-", "+")):
            return False  # a script file
    return True


def _try_base64(text: str) -> str | None:
    candidate = text.strip().strip("'\"")
    try:
        return base64.b64decode(candidate, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return None


def classify(command: str) -> Classification:
    """Judge a shell command line. Never raises; an empty line is ``RiskTier.NONE``.

    Runs in time roughly linear in the length of the line, which is at most `MAX_COMMAND_CHARS`
    (longer lines are classified HIGH, class ``oversized_command``, without being read).
    """
    if len(command) > MAX_COMMAND_CHARS:
        reason = (
            f"the command is {len(command)} characters long, over the {MAX_COMMAND_CHARS} that "
            "exec mediation reads; write long content with the write tool and run a short command"
        )
        return Classification(RiskTier.HIGH, [OVERSIZED], reason)
    analyzer = _Analyzer()
    analyzer.analyze_text(command)
    if not analyzer.findings:
        return Classification(RiskTier.NONE)
    ordered = sorted(analyzer.findings, key=lambda finding: -finding.risk)
    classes = list(dict.fromkeys(finding.danger_class for finding in ordered))
    reason = "; ".join(dict.fromkeys(finding.reason for finding in ordered))
    return Classification(ordered[0].risk, classes, reason)
