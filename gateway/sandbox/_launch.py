"""Start one sandboxed command: run as ``python -I -S _launch.py SPEC -- PROGRAM ARGS...``.

A standalone script (standard library only, no package imports) so that it starts fast and can
do, in the child and before the program starts, what must happen before any of the program's
own code runs: join the call's cgroups, drop to the call's user and group, forbid gaining
privileges (``PR_SET_NO_NEW_PRIVS``: set-user-ID programs stay unprivileged), die with the
daemon (``PR_SET_PDEATHSIG``), lower rlimits, set the umask, change directory, then exec.
SPEC is a JSON object; every key is optional:

    {"cgroups": [".../cgroup.procs"], "gid": 1, "uid": 1, "rlimits": {"NPROC": 64},
     "umask": 7, "cwd": "/work", "kill_uid": false}

With ``"kill_uid": true`` it instead becomes `uid` and sends SIGKILL to every process of that
user (``kill(-1)``), twice, and exits 0: the sweep after a call that ran as a one-off user.
Any failure exits with status 126 and one line on stderr.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _become(spec: dict[str, Any]) -> None:
    for procs in spec.get("cgroups", ()):
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    if "gid" in spec:
        os.setgroups([])
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    if "uid" in spec:
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        if os.getuid() != spec["uid"] or os.geteuid() != spec["uid"]:
            raise OSError("the user did not change")


def main(argv: list[str]) -> int:
    try:
        split = argv.index("--")
        spec = json.loads(argv[1])
        program = argv[split + 1 :]
        _become(spec)
        if spec.get("kill_uid"):
            for _ in range(2):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return 0
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:
            return 126  # the daemon is already gone
        for name, wanted in spec.get("rlimits", {}).items():
            limit = getattr(resource, "RLIMIT_" + name)
            hard = resource.getrlimit(limit)[1]
            value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(limit, (value, value))
        if "umask" in spec:
            os.umask(spec["umask"])
        if "cwd" in spec:
            os.chdir(spec["cwd"])
        # Python ignores these at start-up and an ignored signal stays ignored across exec:
        # restore them, or `yes | head` would end in EPIPE errors instead of a quiet SIGPIPE.
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        os.execvp(program[0], program)
    except (OSError, ValueError, IndexError, KeyError, TypeError) as exc:
        sys.stderr.write(f"sandbox launcher: {exc}\n")
        return 126
    return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv))
