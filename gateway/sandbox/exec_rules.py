"""The rules of exec mediation: the table `COMMAND_RULES` / `rule_for` naming the rule for each
dangerous program, plus the rules every command meets (redirections and credential paths).

The per-program rules live by concept: `exec_rules_files` (deletes, devices, disk wipes,
permissions), `exec_rules_processes` (signals, shutdown) and `exec_rules_code` (shells,
interpreters, netcat, and the rules over code given as text); the kinds of finding they report
are in `exec_finding_kinds`.

A rule receives the command's name (wrappers such as ``sudo`` already stripped) and arguments,
and reports findings to a `FindingSink`; it recurses through the sink into command lines that
the command will run (``bash -c``, ``eval``, ``find -exec``, ``watch``). Relative paths are
resolved through the sink, so ``cd / && rm -rf *`` is judged as ``rm -rf /*``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.sandbox.danger_targets import SHELLS, credential_label, is_device, is_interpreter
from gateway.sandbox.exec_finding_kinds import (
    CREDENTIALS,
    RAW_DEVICE_WRITE,
    RAW_SOCKET,
    REVERSE_SHELL,
    SHUTDOWN,
)
from gateway.sandbox.exec_rules_code import (
    eval_rule,
    interpreter_rule,
    netcat_rule,
    shell_rule,
    socat_rule,
    su_rule,
    watch_rule,
)
from gateway.sandbox.exec_rules_files import (
    chmod_rule,
    chown_rule,
    dd_rule,
    device_writer_rule,
    dynamic_rule,
    find_rule,
    mkfs_rule,
    partition_rule,
    rm_rule,
    shred_rule,
    wipe_rule,
)
from gateway.sandbox.exec_rules_processes import (
    init_rule,
    kill_rule,
    pkill_rule,
    shutdown_rule,
    systemctl_rule,
)
from gateway.sandbox.risk import FindingSink, RiskTier

Rule = Callable[[FindingSink, str, list[str]], None]
WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_DYNAMIC_NAME = re.compile(r"^\$|\$\(\.\.\.\)")


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


COMMAND_RULES: dict[str, Rule] = {
    "rm": rm_rule,
    "find": find_rule,
    "dd": dd_rule,
    "mke2fs": mkfs_rule,
    "mkswap": mkfs_rule,
    "mkntfs": mkfs_rule,
    "mkdosfs": mkfs_rule,
    "newfs": mkfs_rule,
    "fdisk": partition_rule,
    "sfdisk": partition_rule,
    "cfdisk": partition_rule,
    "gdisk": partition_rule,
    "sgdisk": partition_rule,
    "parted": partition_rule,
    "tee": device_writer_rule,
    "cp": device_writer_rule,
    "ddrescue": device_writer_rule,
    "shred": shred_rule,
    "wipefs": wipe_rule,
    "blkdiscard": wipe_rule,
    "sg_format": wipe_rule,
    "hdparm": wipe_rule,
    "nvme": wipe_rule,
    "shutdown": shutdown_rule,
    "reboot": shutdown_rule,
    "halt": shutdown_rule,
    "poweroff": shutdown_rule,
    "init": init_rule,
    "telinit": init_rule,
    "systemctl": systemctl_rule,
    "loginctl": systemctl_rule,
    "chmod": chmod_rule,
    "chown": chown_rule,
    "chgrp": chown_rule,
    "kill": kill_rule,
    "pkill": pkill_rule,
    "killall": pkill_rule,
    "killall5": pkill_rule,
    "nc": netcat_rule,
    "ncat": netcat_rule,
    "netcat": netcat_rule,
    "nc.traditional": netcat_rule,
    "nc.openbsd": netcat_rule,
    "socat": socat_rule,
    "eval": eval_rule,
    "su": su_rule,
    "watch": watch_rule,
}


def rule_for(name: str) -> Rule | None:
    """The rule that judges a command called `name` (a basename), if any."""
    if name in COMMAND_RULES:
        return COMMAND_RULES[name]
    if name.startswith("mkfs"):
        return mkfs_rule
    if name in SHELLS:
        return shell_rule
    if is_interpreter(name):
        return interpreter_rule
    if _DYNAMIC_NAME.search(name):
        return dynamic_rule
    return None
