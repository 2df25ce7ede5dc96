"""Exec mediation's rules about processes and the machine: signalling init, every process, the
gateway or its sandbox (``kill``, ``pkill``, ``killall``), and stopping or restarting the machine
(``shutdown``, ``reboot``, ``init``/``telinit`` run levels, ``systemctl poweroff`` ...)."""

from __future__ import annotations

import re

from gateway.sandbox.danger_targets import split_options
from gateway.sandbox.exec_finding_kinds import KILL_INIT, PROCESS_KILL, SHUTDOWN
from gateway.sandbox.risk import FindingSink, RiskTier


def shutdown_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    sink.add(RiskTier.HIGH, SHUTDOWN, f"{name} stops or restarts the machine")


def init_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    if args and args[0] in ("0", "1", "6", "s", "S"):
        sink.add(
            RiskTier.HIGH, SHUTDOWN, f"{name} {args[0]} changes the run level (halt, single user, reboot)"
        )


_SYSTEMCTL_STOPS = {"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "soft-reboot", "suspend",
                    "hibernate", "hybrid-sleep"}  # fmt: skip


def systemctl_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    operands = split_options(args)[1]
    action = operands[0] if operands else ""
    target = operands[1] if len(operands) > 1 else ""
    if action in _SYSTEMCTL_STOPS or (
        action == "isolate" and target.split(".")[0] in {"poweroff", "reboot", "halt", "rescue", "emergency"}
    ):
        sink.add(RiskTier.HIGH, SHUTDOWN, f"{name} {action} stops or restarts the machine")


def kill_rule(sink: FindingSink, name: str, args: list[str]) -> None:
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


def pkill_rule(sink: FindingSink, name: str, args: list[str]) -> None:
    operands = split_options(args)[1]
    if name == "killall5" or {"init", "systemd", "1"} & set(operands):
        sink.add(RiskTier.HIGH, KILL_INIT, f"{name} kills init or every process")
    elif any(_GATEWAY_PROCESS.search(operand) for operand in operands):
        sink.add(RiskTier.HIGH, PROCESS_KILL, f"{name} signals the gateway or its sandbox by name")
    elif operands:
        reason = f"{name} signals processes by name, which may belong to someone else"
        sink.add(RiskTier.MEDIUM, PROCESS_KILL, reason)
