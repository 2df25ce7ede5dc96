"""The rules of exec mediation: one function per dangerous program, plus rules over
interpreter one-liners, redirections and credential paths.

This module is long, and stays one module, because it is one table: `COMMAND_RULES` and `rule_for`
at the end name every rule above them, and each rule is a short function best read beside its
neighbours.

A rule receives the command's name (wrappers such as ``sudo`` already stripped) and arguments,
and reports findings to a `FindingSink`; it recurses through the sink into command lines that
the command will run (``bash -c``, ``eval``, ``find -exec``, ``watch``). Relative paths are
resolved through the sink, so ``cd / && rm -rf *`` is judged as ``rm -rf /*``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable

from gateway.sandbox.danger_targets import (
    SHELLS,
    credential_label,
    expand_braces,
    has_short_flag,
    is_device,
    is_interpreter,
    path_kind,
    split_options,
)
from gateway.sandbox.risk import FindingSink, RiskTier

Rule = Callable[[FindingSink, str, list[str]], None]
WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})

RECURSIVE_DELETE = "recursive_delete"
RAW_DEVICE_WRITE = "raw_device_write"
DISK_WIPE = "disk_wipe"
FORK_BOMB = "fork_bomb"
PIPE_TO_SHELL = "pipe_to_shell"
SHUTDOWN = "shutdown"
WORLD_WRITABLE = "world_writable_chmod"
SYSTEM_PERMISSIONS = "system_permission_change"
KILL_INIT = "kill_init"
CREDENTIALS = "credential_access"
REVERSE_SHELL = "reverse_shell"
RAW_SOCKET = "raw_socket"
PRIVILEGE = "privilege_escalation"
OBFUSCATED = "obfuscated_command"
PROCESS_KILL = "process_kill"
# What a static reader cannot see through (at least HIGH):
INLINE_CODE = "inline_code"
"""A shell or interpreter runs code given as text (``-c``, ``eval``, stdin, here-strings)."""
INDIRECT_EXEC = "indirect_exec"
"""A command drives another one with arguments known at run time (``xargs``, ``find -exec``)."""
SUBSTITUTION = "command_substitution"
DYNAMIC_COMMAND = "dynamic_command_name"
FUNCTION = "shell_function"
SPAWNING_LOOP = "spawning_loop"
UNPARSED = "unparsed_command"

# Rules over raw text run on whitespace-compacted text and are built so that no pattern can
# backtrack badly (classification runs on the event loop, on text the model controls).
_FUNCTION_OPEN = re.compile(r"\( ?\) ?\{|\bfunction (?P<name>[^\s(){}<>;&|'\"]+) ?(?:\( ?\) ?)?\{")
_WORD = re.compile(r"[^\s(){}<>;&|'\"]+")
_SELF_FORK = re.compile(
    r"\$0 ?[|&] ?\$0|\bfork ?(?:\( ?\))? ?while\b|while ?\(? ?(?:1|true) ?\)? ?[:{]? ?(?:os\.)?fork ?\(",
    re.IGNORECASE,
)
_SOCKET_CODE = re.compile(r"socket|fsockopen|TCPSocket|net\.connect|net\.Socket|IO::Socket|/dev/tcp/", re.I)
_EXEC_CODE = re.compile(
    r"dup2|pty\.spawn|subprocess|\bexec|\bsystem|/bin/(?:ba)?sh|spawn|popen|child_process"
)
_SHELL_CALL = re.compile(r"system|popen|subprocess|exec|spawn|`")
_STRING_LITERAL = re.compile(r"'([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\"")
_CODE_FLAGS = {"-c", "-e", "-E", "-r", "--eval", "-p", "--print"}
_DYNAMIC_NAME = re.compile(r"^\$|\$\(\.\.\.\)")


def _self_forking_functions(text: str) -> list[str]:
    """Names of functions defined in `text` whose body calls the function and backgrounds (``&``).

    ``name() { body }`` and ``function name { body }``; a body ends at the next ``}``. Word, brace
    and ampersand positions are indexed once, so each definition costs a few bisections.
    """
    words: dict[str, list[int]] = {}
    word_ends: dict[int, str] = {}
    for match in _WORD.finditer(text):
        words.setdefault(match.group(), []).append(match.start())
        word_ends[match.end()] = match.group()
    closes = [index for index, char in enumerate(text) if char == "}"]
    amps = [index for index, char in enumerate(text) if char == "&"]
    found: list[str] = []
    for match in _FUNCTION_OPEN.finditer(text):
        name = match.group("name") or word_ends.get(match.start()) or word_ends.get(match.start() - 1)
        if name is None:
            continue
        body = match.end()
        nxt = bisect.bisect_left(closes, body)
        body_end = closes[nxt] if nxt < len(closes) else len(text)
        amp = bisect.bisect_left(amps, body)
        calls = words.get(name, [])
        call = bisect.bisect_left(calls, body)
        if amp < len(amps) and amps[amp] < body_end and call < len(calls) and calls[call] < body_end:
            found.append(name)
    return found


def text_rules(sink: FindingSink, text: str) -> None:
    """Rules over a command line's raw text: fork bombs in any of their spellings."""
    text = re.sub(r"\s+", " ", text)
    for name in dict.fromkeys(_self_forking_functions(text)):
        reason = f"fork bomb: function {name} keeps starting copies of itself"
        sink.add(RiskTier.CRITICAL, FORK_BOMB, reason)
    if _SELF_FORK.search(text):
        sink.add(RiskTier.CRITICAL, FORK_BOMB, "fork bomb: a process that keeps forking itself")


def code_rules(sink: FindingSink, interpreter: str, code: str) -> None:
    """Rules over an interpreter one-liner (``python -c``, ``perl -e`` ...)."""
    text_rules(sink, code)
    code = re.sub(r"\s+", " ", code)
    if _SOCKET_CODE.search(code) and _EXEC_CODE.search(code):
        sink.add(RiskTier.HIGH, REVERSE_SHELL, f"{interpreter} one-liner connects a socket to a shell")
    for word in re.split(r"[\s'\"(),;]+", code):
        label = credential_label(word)
        if label:
            sink.add(RiskTier.HIGH, CREDENTIALS, f"{interpreter} one-liner touches {label} ({word})")
    if _SHELL_CALL.search(code):
        for match in _STRING_LITERAL.finditer(code):
            literal = match.group(1) if match.group(1) is not None else match.group(2)
            if literal and " " in literal:
                sink.analyze_text(literal)


def redirect_rules(sink: FindingSink, words: list[str], redirects: list[tuple[str, str]]) -> None:
    name = words[0].rsplit("/", 1)[-1] if words else ""
    for operator, raw_target in redirects:
        target = sink.resolve(raw_target)
        writes = operator in WRITE_REDIRECTS
        if writes and is_device(target):
            sink.add(RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"writes straight to the device {target}")
        if writes and target == "/proc/sysrq-trigger":
            sink.add(RiskTier.HIGH, SHUTDOWN, "sends a kernel SysRq command (can reboot or halt)")
        if "/dev/tcp/" in target or "/dev/udp/" in target:
            if not words or name in SHELLS or name == "exec" or "-i" in words:
                sink.add(RiskTier.HIGH, REVERSE_SHELL, f"wires a shell to a network socket ({target})")
            else:
                sink.add(RiskTier.MEDIUM, RAW_SOCKET, f"opens a raw network socket ({target})")
        label = credential_label(target)
        if label:
            sink.add(RiskTier.HIGH, CREDENTIALS, f"redirects to or from {label} ({target})")


def credential_rules(sink: FindingSink, words: list[str]) -> None:
    for raw in words[1:]:
        word = sink.resolve(raw) if not raw.startswith("-") else raw
        label = credential_label(word)
        if label:
            sink.add(RiskTier.HIGH, CREDENTIALS, f"touches {label} ({word})")
        if "/dev/tcp/" in word or "/dev/udp/" in word:
            sink.add(RiskTier.MEDIUM, RAW_SOCKET, f"names a raw network socket ({word})")


def _targets(sink: FindingSink, operands: list[str]) -> list[str]:
    return [sink.resolve(expanded) for operand in operands for expanded in expand_braces(operand)]


_DELETE_VERDICTS: dict[str, tuple[RiskTier, str]] = {
    "root": (RiskTier.CRITICAL, "recursive delete of the root directory ({target})"),
    "home": (RiskTier.CRITICAL, "recursive delete of the home directory ({target})"),
    "system_top": (RiskTier.CRITICAL, "recursive delete of the system directory {norm}"),
    "system": (RiskTier.MEDIUM, "recursive delete inside a system directory ({norm})"),
    "var_prefix": (RiskTier.MEDIUM, "recursive delete of {target}, a path known only at run time"),
    "parent": (RiskTier.LOW, "recursive delete outside the working directory ({target})"),
}


def _rm(sink: FindingSink, name: str, args: list[str]) -> None:
    options, operands = split_options(args)
    if "--no-preserve-root" in options:
        reason = "rm --no-preserve-root disables the guard against deleting /"
        sink.add(RiskTier.CRITICAL, RECURSIVE_DELETE, reason)
    if not ("--recursive" in options or has_short_flag(options, "rR")):
        return
    for target in _targets(sink, operands):
        kind, norm = path_kind(target)
        verdict = _DELETE_VERDICTS.get(kind)
        if verdict is not None:
            sink.add(verdict[0], RECURSIVE_DELETE, verdict[1].format(target=target, norm=norm))


def _dynamic(sink: FindingSink, name: str, args: list[str]) -> None:
    """A command whose name is only known at run time: judge it as rm and chmod would be."""
    _rm(sink, name, args)
    _chmod(sink, name, args)


def _find(sink: FindingSink, name: str, args: list[str]) -> None:
    roots = []
    for arg in args:
        if arg.startswith(("-", "(", "!")) and arg not in ("-H", "-L", "-P"):
            break
        if arg not in ("-H", "-L", "-P"):
            roots.append(sink.resolve(arg))
    deletes = "-delete" in args
    index = 0
    while index < len(args):
        if args[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(args) and args[end] not in (";", "+", "\\;"):
                end += 1
            command = args[index + 1 : end]
            if command:
                deletes = deletes or command[0].rsplit("/", 1)[-1] in ("rm", "shred", "unlink")
                reason = (
                    f"find {args[index]} runs {command[0]} on every file found, which exec mediation "
                    "cannot see"
                )
                sink.add(RiskTier.HIGH, INDIRECT_EXEC, reason)
                sink.analyze_words(command)
            index = end
        index += 1
    if deletes:
        for root in roots:
            kind, norm = path_kind(root)
            if kind in ("root", "home", "system_top"):
                sink.add(RiskTier.CRITICAL, RECURSIVE_DELETE, f"find deletes everything under {norm}")


def _dd(sink: FindingSink, name: str, args: list[str]) -> None:
    for arg in args:
        if arg.startswith("of=") and is_device(arg[3:]):
            sink.add(RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"dd writes straight to the device {arg[3:]}")


def _mkfs(sink: FindingSink, name: str, args: list[str]) -> None:
    sink.add(
        RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"{name} creates a file system, erasing what the device held"
    )


def _partition(sink: FindingSink, name: str, args: list[str]) -> None:
    options, operands = split_options(args)
    if name == "sgdisk" and any(
        opt in ("-Z", "--zap-all", "-o", "--clear", "-z", "--zap") for opt in options
    ):
        sink.add(RiskTier.CRITICAL, DISK_WIPE, "sgdisk erases the partition table")
    elif any(is_device(op) for op in operands) and not ({"-l", "--list", "-s"} & set(options)):
        sink.add(RiskTier.HIGH, RAW_DEVICE_WRITE, f"{name} edits a disk's partition table")


def _device_writer(sink: FindingSink, name: str, args: list[str]) -> None:
    _, operands = split_options(args)
    targets = operands if name == "tee" else operands[-1:]
    for target in targets:
        if is_device(target):
            sink.add(RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"{name} writes straight to the device {target}")


def _shred(sink: FindingSink, name: str, args: list[str]) -> None:
    for operand in split_options(args)[1]:
        if is_device(operand):
            sink.add(RiskTier.CRITICAL, DISK_WIPE, f"shred overwrites the device {operand}")


def _wipe(sink: FindingSink, name: str, args: list[str]) -> None:
    if name == "hdparm" and not any("security-erase" in arg or "trim-sector" in arg for arg in args):
        return
    if name == "nvme" and not ({"format", "sanitize"} & set(args)):
        return
    sink.add(RiskTier.CRITICAL, DISK_WIPE, f"{name} erases a disk")


def _shutdown(sink: FindingSink, name: str, args: list[str]) -> None:
    sink.add(RiskTier.HIGH, SHUTDOWN, f"{name} stops or restarts the machine")


def _init(sink: FindingSink, name: str, args: list[str]) -> None:
    if args and args[0] in ("0", "1", "6", "s", "S"):
        sink.add(
            RiskTier.HIGH, SHUTDOWN, f"{name} {args[0]} changes the run level (halt, single user, reboot)"
        )


_SYSTEMCTL_STOPS = {"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "soft-reboot", "suspend",
                    "hibernate", "hybrid-sleep"}  # fmt: skip


def _systemctl(sink: FindingSink, name: str, args: list[str]) -> None:
    operands = split_options(args)[1]
    action = operands[0] if operands else ""
    target = operands[1] if len(operands) > 1 else ""
    if action in _SYSTEMCTL_STOPS or (
        action == "isolate" and target.split(".")[0] in {"poweroff", "reboot", "halt", "rescue", "emergency"}
    ):
        sink.add(RiskTier.HIGH, SHUTDOWN, f"{name} {action} stops or restarts the machine")


def _world_writable(mode: str) -> bool:
    if re.fullmatch(r"[0-7]{3,4}", mode):
        return bool(int(mode[-1]) & 2)
    for clause in mode.split(","):
        match = re.fullmatch(r"([ugoa]*)((?:[-+=][rwxXstugo]*)+)", clause)
        if match is None or not ({"o", "a"} & set(match.group(1))):
            continue
        if any(op[0] in "+=" and "w" in op for op in re.findall(r"[-+=][rwxXstugo]*", match.group(2))):
            return True
    return False


def _mode_and_files(args: list[str]) -> tuple[bool, str | None, list[str]]:
    recursive = False
    words: list[str] = []
    for arg in args:
        if arg in ("-R", "--recursive") or re.fullmatch(r"-[Rfvc]*R[Rfvc]*", arg):
            recursive = True
        elif arg.startswith("--") or re.fullmatch(r"-[fvch]+", arg):
            continue
        else:
            words.append(arg)
    if not words:
        return recursive, None, []
    return recursive, words[0], words[1:]


def _chmod(sink: FindingSink, name: str, args: list[str]) -> None:
    recursive, mode, files = _mode_and_files(args)
    if mode is None:
        return
    kinds = [path_kind(target) for target in _targets(sink, files)]
    broad = [norm for kind, norm in kinds if kind in ("root", "home", "system_top")]
    system = [norm for kind, norm in kinds if kind == "system"]
    if _world_writable(mode):
        if broad:
            sink.add(RiskTier.CRITICAL, WORLD_WRITABLE, f"makes {broad[0]} writable by every user")
        elif system or recursive:
            where = system[0] if system else "a whole tree"
            sink.add(RiskTier.HIGH, WORLD_WRITABLE, f"makes {where} writable by every user (chmod {mode})")
        elif files:
            sink.add(RiskTier.MEDIUM, WORLD_WRITABLE, f"makes files writable by every user (chmod {mode})")
    elif recursive and broad:
        sink.add(RiskTier.CRITICAL, SYSTEM_PERMISSIONS, f"changes permissions of everything under {broad[0]}")


def _chown(sink: FindingSink, name: str, args: list[str]) -> None:
    recursive, owner, files = _mode_and_files(args)
    if owner is None:
        return
    for kind, norm in (path_kind(target) for target in _targets(sink, files)):
        if kind in ("root", "home", "system_top") and (recursive or kind != "home"):
            risk = RiskTier.CRITICAL if recursive else RiskTier.HIGH
            sink.add(risk, SYSTEM_PERMISSIONS, f"{name} changes the owner of {norm}")


def _kill(sink: FindingSink, name: str, args: list[str]) -> None:
    pids: list[str] = []
    signal_given = False
    lone_signal = ""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            pids.extend(args[index + 1 :])
            break
        if arg in ("-l", "-L", "--list", "--table"):
            return
        if arg in ("-s", "-n", "--signal"):
            signal_given = True
            index += 2
            continue
        if arg.startswith("-") and len(arg) > 1 and not signal_given:
            signal_given, lone_signal = True, arg
        else:
            pids.append(arg)
        index += 1
    if not pids and lone_signal == "-1":
        pids = ["-1"]  # `kill -1`: read as aimed at every process rather than guessed harmless
    for pid in pids:
        if pid == "1":
            sink.add(RiskTier.HIGH, KILL_INIT, "kills pid 1 (init), which takes the whole system down")
        elif pid == "-1":
            sink.add(RiskTier.HIGH, KILL_INIT, "kills every process the user can signal (pid -1)")
        elif _PARENT_PID.fullmatch(pid):
            sink.add(RiskTier.HIGH, PROCESS_KILL, f"signals the process that started this command ({pid})")
        elif pid.startswith("$") or "$(" in pid:
            sink.add(RiskTier.MEDIUM, PROCESS_KILL, f"signals a process known only at run time ({pid})")


_PARENT_PID = re.compile(r"-?\$\{?PPID\}?|-?\$\(\.\.\.\)")
_GATEWAY_PROCESS = re.compile(r"gateway|python|uvicorn|bwrap|sandbox", re.IGNORECASE)


def _pkill(sink: FindingSink, name: str, args: list[str]) -> None:
    operands = split_options(args)[1]
    if name == "killall5" or {"init", "systemd", "1"} & set(operands):
        sink.add(RiskTier.HIGH, KILL_INIT, f"{name} kills init or every process")
    elif any(_GATEWAY_PROCESS.search(operand) for operand in operands):
        sink.add(RiskTier.HIGH, PROCESS_KILL, f"{name} signals the gateway or its sandbox by name")
    elif operands:
        reason = f"{name} signals processes by name, which may belong to someone else"
        sink.add(RiskTier.MEDIUM, PROCESS_KILL, reason)


def _netcat(sink: FindingSink, name: str, args: list[str]) -> None:
    for arg in args:
        long_exec = arg.split("=", 1)[0] in ("--exec", "--sh-exec", "--lua-exec")
        short_exec = re.fullmatch(r"-[A-Za-z]*[ec].*", arg) is not None and not arg.startswith("--")
        if long_exec or short_exec:
            sink.add(RiskTier.HIGH, REVERSE_SHELL, f"{name} {arg} hands a network connection to a program")
            return


def _socat(sink: FindingSink, name: str, args: list[str]) -> None:
    if any(re.search(r"(?i)(?:^|[,!])(?:exec|system):", arg) for arg in args):
        sink.add(RiskTier.HIGH, REVERSE_SHELL, "socat connects a network address to a program")


def _inline_shell(sink: FindingSink, name: str, code: str) -> None:
    reason = f"{name} runs shell code given as text, which exec mediation reads but cannot vouch for"
    sink.add(RiskTier.HIGH, INLINE_CODE, reason)
    sink.analyze_text(code)


def _shell(sink: FindingSink, name: str, args: list[str]) -> None:
    """``bash -c STRING``: analyse STRING as a command line."""
    index = 0
    wants_string = False
    while index < len(args):
        arg = args[index]
        if arg in ("-o", "+o", "-O", "+O"):
            index += 2
            continue
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            wants_string = True
        elif not arg.startswith(("-", "+")):
            if wants_string:
                _inline_shell(sink, name, arg)
            return
        index += 1
    if wants_string:
        _inline_shell(sink, name, "")


def _eval(sink: FindingSink, name: str, args: list[str]) -> None:
    _inline_shell(sink, name, " ".join(args))


def _su(sink: FindingSink, name: str, args: list[str]) -> None:
    for index, arg in enumerate(args):
        if arg in ("-c", "--command") and index + 1 < len(args):
            _inline_shell(sink, name, args[index + 1])
        elif arg.startswith("--command="):
            _inline_shell(sink, name, arg.split("=", 1)[1])


def _watch(sink: FindingSink, name: str, args: list[str]) -> None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-n", "--interval", "-d", "--differences") else 1
    if index < len(args):
        _inline_shell(sink, name, " ".join(args[index:]))


def _interpreter(sink: FindingSink, name: str, args: list[str]) -> None:
    for index, arg in enumerate(args):
        if (arg in _CODE_FLAGS or (arg.startswith("-") and arg[-1:] in "ce" and len(arg) > 2
                                   and not arg.startswith("--"))) and index + 1 < len(args):  # fmt: skip
            reason = f"{name} runs code given inline ({arg}), which exec mediation cannot follow"
            sink.add(RiskTier.HIGH, INLINE_CODE, reason)
            code_rules(sink, name, args[index + 1])
            return


COMMAND_RULES: dict[str, Rule] = {
    "rm": _rm,
    "find": _find,
    "dd": _dd,
    "mke2fs": _mkfs,
    "mkswap": _mkfs,
    "mkntfs": _mkfs,
    "mkdosfs": _mkfs,
    "newfs": _mkfs,
    "fdisk": _partition,
    "sfdisk": _partition,
    "cfdisk": _partition,
    "gdisk": _partition,
    "sgdisk": _partition,
    "parted": _partition,
    "tee": _device_writer,
    "cp": _device_writer,
    "ddrescue": _device_writer,
    "shred": _shred,
    "wipefs": _wipe,
    "blkdiscard": _wipe,
    "sg_format": _wipe,
    "hdparm": _wipe,
    "nvme": _wipe,
    "shutdown": _shutdown,
    "reboot": _shutdown,
    "halt": _shutdown,
    "poweroff": _shutdown,
    "init": _init,
    "telinit": _init,
    "systemctl": _systemctl,
    "loginctl": _systemctl,
    "chmod": _chmod,
    "chown": _chown,
    "chgrp": _chown,
    "kill": _kill,
    "pkill": _pkill,
    "killall": _pkill,
    "killall5": _pkill,
    "nc": _netcat,
    "ncat": _netcat,
    "netcat": _netcat,
    "nc.traditional": _netcat,
    "nc.openbsd": _netcat,
    "socat": _socat,
    "eval": _eval,
    "su": _su,
    "watch": _watch,
}


def rule_for(name: str) -> Rule | None:
    """The rule that judges a command called `name` (a basename), if any."""
    if name in COMMAND_RULES:
        return COMMAND_RULES[name]
    if name.startswith("mkfs"):
        return _mkfs
    if name in SHELLS:
        return _shell
    if is_interpreter(name):
        return _interpreter
    if _DYNAMIC_NAME.search(name):
        return _dynamic
    return None
