"""Exec mediation's rules about files and devices: recursive deletes (``rm``, ``find -delete``),
writes straight to block devices (``dd``, ``mkfs``, partition tools, ``tee``/``cp`` onto a device),
disk wipes (``shred``, ``wipefs``, ``blkdiscard`` ...), and permission or owner changes
(``chmod``, ``chown``) of broad or system paths."""

from __future__ import annotations

import re

from gateway.sandbox.danger_targets import expand_braces, has_short_flag, is_device, path_kind, split_options
from gateway.sandbox.exec_finding_kinds import (
    DISK_WIPE,
    INDIRECT_EXEC,
    RAW_DEVICE_WRITE,
    RECURSIVE_DELETE,
    SYSTEM_PERMISSIONS,
    WORLD_WRITABLE,
)
from gateway.sandbox.risk import FindingSink, RiskTier


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


def rm_rule(sink: FindingSink, name: str, args: list[str]) -> None:
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


def dynamic_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    """A command whose name is only known at run time: judge it as rm and chmod would be."""
    rm_rule(sink, name, args)
    chmod_rule(sink, name, args)


def find_rule(sink: FindingSink, name: str, args: list[str]) -> None:
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


def dd_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    for arg in args:
        if arg.startswith("of=") and is_device(arg[3:]):
            sink.add(RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"dd writes straight to the device {arg[3:]}")


def mkfs_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    sink.add(
        RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"{name} creates a file system, erasing what the device held"
    )


def partition_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    options, operands = split_options(args)
    if name == "sgdisk" and any(
        opt in ("-Z", "--zap-all", "-o", "--clear", "-z", "--zap") for opt in options
    ):
        sink.add(RiskTier.CRITICAL, DISK_WIPE, "sgdisk erases the partition table")
    elif any(is_device(op) for op in operands) and not ({"-l", "--list", "-s"} & set(options)):
        sink.add(RiskTier.HIGH, RAW_DEVICE_WRITE, f"{name} edits a disk's partition table")


def device_writer_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    _, operands = split_options(args)
    targets = operands if name == "tee" else operands[-1:]
    for target in targets:
        if is_device(target):
            sink.add(RiskTier.CRITICAL, RAW_DEVICE_WRITE, f"{name} writes straight to the device {target}")


def shred_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    for operand in split_options(args)[1]:
        if is_device(operand):
            sink.add(RiskTier.CRITICAL, DISK_WIPE, f"shred overwrites the device {operand}")


def wipe_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    if name == "hdparm" and not any("security-erase" in arg or "trim-sector" in arg for arg in args):
        return
    if name == "nvme" and not ({"format", "sanitize"} & set(args)):
        return
    sink.add(RiskTier.CRITICAL, DISK_WIPE, f"{name} erases a disk")


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


def chmod_rule(sink: FindingSink, name: str, args: list[str]) -> None:
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


def chown_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    recursive, owner, files = _mode_and_files(args)
    if owner is None:
        return
    for kind, norm in (path_kind(target) for target in _targets(sink, files)):
        if kind in ("root", "home", "system_top") and (recursive or kind != "home"):
            risk = RiskTier.CRITICAL if recursive else RiskTier.HIGH
            sink.add(risk, SYSTEM_PERMISSIONS, f"{name} changes the owner of {norm}")
