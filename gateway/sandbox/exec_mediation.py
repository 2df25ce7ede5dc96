"""Exec mediation: classify a shell command line by how dangerous it could be.

`classify(command)` reads the line with the bash grammar (`shell_syntax`), so it judges the
syntax tree rather than the text: every simple command found anywhere in it (pipelines, lists,
loops, conditionals, subshells, function bodies, substitutions) has wrappers that only change how
it runs stripped (``sudo``, ``env``, ``nohup``, ``timeout`` ...) and meets the rules of
`exec_rules`. Code handed to a shell or an interpreter as text (``bash -c``, ``eval``, here-strings,
here-documents, echoed text piped to ``sh``) is read in turn when it is literal.

What a static reader cannot see through is classified at least HIGH, so the default threshold
refuses it: command substitutions whose output becomes part of a command, ``eval``, shells and
interpreters given code as text or on standard input, ``xargs`` and ``find -exec`` driving another
command, shell functions, command names taken from variables, loops that start background jobs,
and lines the grammar cannot parse. Mediation is a policy layer in front of the sandbox, not a
proof: a script written to a file and run is judged by its command line only.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
import shlex
from collections import deque

import msgspec

from gateway.sandbox.danger_targets import DOWNLOADERS, NETWORK_TOOLS, SHELLS, SOURCING, is_interpreter
from gateway.sandbox.exec_finding_kinds import (
    DYNAMIC_COMMAND,
    FORK_BOMB,
    FUNCTION,
    INDIRECT_EXEC,
    INLINE_CODE,
    OBFUSCATED,
    PIPE_TO_SHELL,
    PRIVILEGE,
    REVERSE_SHELL,
    SPAWNING_LOOP,
    SUBSTITUTION,
    UNPARSED,
)
from gateway.sandbox.exec_rules import credential_rules, redirect_rules, rule_for
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.shell_script import Command, Script
from gateway.sandbox.shell_syntax import read_script
from gateway.sandbox.shell_words import Word

__all__ = ["Classification", "RiskTier", "classify"]

MAX_DEPTH = 6
"""How deep code nested in code (``bash -c "eval '...'"``) is read."""
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
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u"}),
    "chroot": frozenset({"--userspec", "--groups"}),
    "flock": frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(), "command": frozenset(), "builtin": frozenset(), "setsid": frozenset(),
    "unbuffer": frozenset(), "busybox": frozenset(), "caffeinate": frozenset(), "chronic": frozenset(),
    "prlimit": frozenset(), "taskset": frozenset(), "unshare": frozenset(), "nsenter": frozenset(),
}  # fmt: skip
_WRAPPER_POSITIONALS = {"timeout": 1, "chroot": 1, "flock": 1, "taskset": 1}
_DRIVERS: dict[str, frozenset[str]] = {
    "xargs": frozenset({"-I", "-i", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a", "--max-args",
                        "--max-procs", "--delimiter", "--arg-file", "--replace", "--max-lines", "--eof"}),
    "parallel": frozenset({"-j", "--jobs", "-S", "--sshlogin", "-a", "--arg-file", "--delay"}),
}  # fmt: skip
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_RESERVED = frozenset({"{", "}", "!", "then", "do", "else", "elif", "fi", "done", "esac"})
_DECODERS = re.compile(r"^(?:base64|base32|basenc|xxd|openssl|gunzip|zcat|gzip|bzip2|xz|uudecode|rev|tr)$")
_PRINT_ONLY = frozenset({"echo", "printf", "test", "[", "[[", "true", "false", ":"})
"""Commands whose words only reach output or a test, so a substitution in them hides no action."""

MAX_COMMAND_CHARS = 100_000
"""Longer command lines are refused unread: analysing them costs too much, and skipping part of
one would let padding hide a dangerous command."""
OVERSIZED = "oversized_command"


class Classification(msgspec.Struct, frozen=True, dict=True):
    """The verdict on one command line. `classes` lists danger classes, most serious first."""

    risk: RiskTier
    classes: list[str] = msgspec.field(default_factory=list)
    reason: str = ""


class _Finding(msgspec.Struct, frozen=True, dict=True):
    risk: RiskTier
    danger_class: str
    reason: str


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word and not word.endswith("/") else word


class _Analyzer:
    """Collects findings over one command line and the code nested in it (a `FindingSink`)."""

    def __init__(self) -> None:
        self._findings: dict[_Finding, None] = {}
        self._depth = 0
        self._cwd: str | None = None

    # FindingSink
    def add(self, risk: RiskTier, danger_class: str, reason: str) -> None:
        self._findings[_Finding(risk, danger_class, reason)] = None

    def resolve(self, path: str) -> str:
        """`path` as seen from the directory the current command runs in."""
        if self._cwd is None or path.startswith(("/", "~", "$")) or not path:
            return path
        return posixpath.join(self._cwd, path)

    @property
    def findings(self) -> list[_Finding]:
        return list(self._findings)

    def analyze_text(self, text: str) -> None:
        if self._depth > MAX_DEPTH or not text.strip():
            return
        self._depth += 1
        saved = self._cwd
        try:
            self._script(read_script(text))
        finally:
            self._cwd = saved
            self._depth -= 1

    def analyze_words(self, words: list[str]) -> None:
        if self._depth > MAX_DEPTH or not words:
            return
        self._depth += 1
        try:
            self._command(Command(words=[Word(word) for word in words]))
        finally:
            self._depth -= 1

    # walking what the reader found
    def _script(self, script: Script) -> None:
        if script.errors:
            self.add(
                RiskTier.HIGH,
                UNPARSED,
                f"the command cannot be parsed as shell near {script.errors[0]!r}, so exec mediation "
                "cannot tell what it runs",
            )
        for function in script.functions:
            if function.spawns_itself:
                reason = f"fork bomb: function {function.name} keeps starting copies of itself"
                self.add(RiskTier.CRITICAL, FORK_BOMB, reason)
            self.add(
                RiskTier.HIGH,
                FUNCTION,
                f"defines the shell function {function.name!r}, whose calls exec mediation cannot follow",
            )
        for loop in script.spawning_loops:
            self.add(RiskTier.HIGH, SPAWNING_LOOP, f"a loop starts background jobs on every pass ({loop})")
        for command in script.commands:
            self._cwd = command.cwd
            self._command(command)

    def _command(self, command: Command) -> None:
        words = [word.text for word in command.words]
        redirect_rules(
            self,
            words,
            [(r.operator, r.target.text if r.target is not None else "") for r in command.redirects],
        )
        credential_rules(self, words)
        self._opaque_words(command)
        if command.indirect_name:
            self.add(
                RiskTier.HIGH,
                DYNAMIC_COMMAND,
                f"the command's name comes from a variable or substitution ({command.words[0].text}), "
                "which exec mediation cannot see through",
            )
        resolved = self._strip_wrappers(words)
        if resolved is None:
            return
        name, args = _basename(resolved[0]), resolved[1:]
        if name in _DRIVERS:
            self._driver(name, args)
            return
        self._code_input(command, name, args)
        rule = rule_for(name)
        if rule is not None:
            rule(self, name, args)
        if command.upstream:
            self._pipeline(command, name, args)

    def _opaque_words(self, command: Command) -> None:
        """A command substitution whose output becomes part of a command hides what runs."""
        substituted = [word for word in command.words if word.substituted]
        substituted += [r.target for r in command.redirects if r.target is not None and r.target.substituted]
        if not substituted:
            return
        if command.name in _PRINT_ONLY and not command.words[0].substituted:
            return
        self.add(
            RiskTier.HIGH,
            SUBSTITUTION,
            f"passes the output of a command substitution to {command.name or 'the shell'}, which exec "
            "mediation cannot see through; run the inner command first and use its output literally",
        )

    def _code_input(self, command: Command, name: str, args: list[str]) -> None:
        """Shells and interpreters that read their program from standard input or a substitution."""
        runs_code = name in SHELLS or is_interpreter(name) or name in SOURCING
        if not runs_code:
            return
        if any(inner.name in DOWNLOADERS for inner in command.substitutions):
            self.add(RiskTier.HIGH, PIPE_TO_SHELL, f"{name} runs a script fetched from the network")
        if any(word.process for word in command.words[1:]):
            self.add(RiskTier.HIGH, INLINE_CODE, f"{name} runs a program fed to it by a process substitution")
        if name in SOURCING or not _reads_program_from_stdin(name, args):
            return
        source = command.stdin
        if source in ("heredoc", "herestring"):
            kind = "here-document" if source == "heredoc" else "here-string"
            self.add(RiskTier.HIGH, INLINE_CODE, f"{name} runs a program given to it as a {kind}")
            text = command.stdin_text()
            if text and name in SHELLS:
                self.analyze_text(text)
            elif text:
                self._interpreter_code(name, text)
        elif source == "pipe":
            self.add(RiskTier.HIGH, INLINE_CODE, f"{name} runs a program piped into it")

    def _interpreter_code(self, name: str, code: str) -> None:
        from gateway.sandbox.exec_rules_code import code_rules

        code_rules(self, name, code)

    def _driver(self, name: str, args: list[str]) -> None:
        """``xargs`` and ``parallel`` run a command with arguments read at run time."""
        takes_value = _DRIVERS[name]
        index = 0
        while index < len(args) and args[index].startswith("-") and args[index] != "--":
            index += 2 if args[index] in takes_value else 1
        if index < len(args) and args[index] == "--":
            index += 1
        inner = args[index:] or ["echo"]
        self.add(
            RiskTier.HIGH,
            INDIRECT_EXEC,
            f"{name} runs {_basename(inner[0])} with arguments read at run time, which exec mediation "
            "cannot see",
        )
        self.analyze_words(inner)

    def _strip_wrappers(self, words: list[str]) -> list[str] | None:
        """The command a wrapper chain finally runs, or ``None`` when it runs nothing. The words
        are consumed from the front of one queue, so a chain of any length costs time in
        proportion to its words."""
        queue = deque(words)
        while queue:
            if queue[0] in _RESERVED:
                queue.popleft()  # a reserved word the grammar read as a name (``! { rm x; }``)
                continue
            name = _basename(queue[0])
            if name not in _WRAPPER_ARGS:
                return list(queue)
            if name in _PRIVILEGED:
                self.add(RiskTier.LOW, PRIVILEGE, f"runs a command through {name}")
            if name == "su":
                return list(queue)
            if name == "command" and len(queue) > 1 and queue[1] in ("-v", "-V"):
                return None
            queue.popleft()
            if not self._skip_wrapper_options(name, queue):
                return None
        return None

    def _skip_wrapper_options(self, name: str, queue: deque[str]) -> bool:
        """Take the wrapper's options and positional arguments off the front of `queue` (``env
        -S`` puts the words of its string in their place); False when nothing is left to run."""
        takes_value = _WRAPPER_ARGS[name]
        while queue:
            arg = queue[0]
            if arg == "--":
                queue.popleft()
                break
            if name == "env" and _ASSIGNMENT.match(arg):
                queue.popleft()
                continue
            if name == "env" and (
                arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string="))
            ):
                queue.popleft()
                inline = arg[2:] if arg.startswith("-S") else arg.partition("=")[2]
                value = inline or (queue.popleft() if queue else "")
                if value:
                    try:
                        split = shlex.split(value, comments=False)
                    except ValueError:
                        split = value.split()
                    queue.extendleft(reversed(split))
                return bool(queue)
            if not (arg.startswith("-") and len(arg) > 1):
                break
            queue.popleft()
            if arg in takes_value and queue:
                queue.popleft()
        for _ in range(_WRAPPER_POSITIONALS.get(name, 0)):
            if not queue:
                return False
            queue.popleft()
        return bool(queue)

    def _pipeline(self, command: Command, name: str, args: list[str]) -> None:
        upstream_names = {_basename(cmd.words[0].text) for cmd in command.upstream if cmd.words}
        if _reads_program_from_stdin(name, args) and command.stdin == "pipe":
            if upstream_names & DOWNLOADERS:
                self.add(RiskTier.HIGH, PIPE_TO_SHELL, f"pipes a download into {name}")
            else:
                self._piped_text(command.upstream, name)
        if name in SHELLS and upstream_names & NETWORK_TOOLS:
            self.add(RiskTier.HIGH, REVERSE_SHELL, "pipes a network connection through a shell")
        if name in NETWORK_TOOLS and any(cmd.name in SHELLS for cmd in command.upstream):
            self.add(RiskTier.HIGH, REVERSE_SHELL, "pipes a shell through a network connection")

    def _piped_text(self, upstream: list[Command], runner: str) -> None:
        """``echo ... | sh`` runs the echoed text; decode it first if a decoder sits in between."""
        if not upstream:
            return
        first = upstream[0]
        text = first.stdin_text() or ""
        if first.name in ("echo", "printf"):
            text = " ".join(arg for arg in first.args if not re.fullmatch(r"-[neE]+", arg))
        if not text:
            return
        if any(_DECODERS.match(cmd.name) for cmd in upstream):
            self.add(RiskTier.HIGH, OBFUSCATED, f"decodes hidden text and runs it with {runner}")
            text = _try_base64(text) or ""
        if runner in SHELLS:
            self.analyze_text(text)
        else:
            self._interpreter_code(runner, text)


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


_ARITHMETIC = re.compile(r"\$\(\((.*?)\)\)", re.DOTALL)
"""The inside of each `$(( ... ))` of a line (the first `))` ends it)."""
_ARITHMETIC_STARTS = frozenset("$0123456789(+-!~")


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
    for inner in _ARITHMETIC.findall(command):
        # `$(( cat /etc/shadow ))` reads as arithmetic to bash, but a shell that falls back to
        # `$( ( cat /etc/shadow ) )` would run it: its inside is read as commands too (which only
        # adds findings), unless it starts as arithmetic does (`$i + 1`, `2 * x`, `(a)`, `-n`).
        if inner.strip()[:1] not in _ARITHMETIC_STARTS:
            analyzer.analyze_text(inner)
    if not analyzer.findings:
        return Classification(RiskTier.NONE)
    ordered = sorted(analyzer.findings, key=lambda finding: -finding.risk)
    classes = list(dict.fromkeys(finding.danger_class for finding in ordered))
    reason = "; ".join(dict.fromkeys(finding.reason for finding in ordered))
    return Classification(ordered[0].risk, classes, reason)
