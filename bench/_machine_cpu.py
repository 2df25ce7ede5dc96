"""The CPU of what shares the machine with a benchmark's daemons: PostgreSQL's processes, Redis
and the benchmark's own client workers, read per process so that the span between two readings
can be told apart from processes that came and went."""

from __future__ import annotations

import psutil

from bench._daemon import cpu_seconds

__all__ = ["CLIENTS", "OTHERS", "ProcessTimes", "others_cpu", "spent"]

OTHERS = {"postgres": "PostgreSQL's", "redis-server": "Redis's"}
"""Process names of the services the nodes share the machine with, and the label of their rows."""
CLIENTS = "client workers'"

ProcessTimes = dict[int, tuple[str, float]]
"""Per process id: its row label and its CPU seconds so far."""


def others_cpu(client_pids: list[int]) -> ProcessTimes:
    """CPU seconds so far of each of PostgreSQL's and Redis's processes on this machine, and of
    the client workers."""
    times: ProcessTimes = {}
    for proc in psutil.process_iter(["name"]):
        label = OTHERS.get(proc.info["name"] or "")
        if label is None and proc.pid in client_pids:
            label = CLIENTS
        if label is None:
            continue
        try:
            times[proc.pid] = (label, cpu_seconds(proc.pid))
        except (OSError, psutil.Error):
            continue
    return times


def spent(before: ProcessTimes, after: ProcessTimes) -> dict[str, float]:
    """CPU seconds per label between two readings: a process seen in both counts its difference,
    one started in between all it used. One that ended in between is not counted (its time
    went with it), so PostgreSQL backends of other programs that come and go cannot make a
    figure negative; the nodes' pooled connections stay open through a measurement."""
    totals = {label: 0.0 for label in (*OTHERS.values(), CLIENTS)}
    for pid, (label, seconds) in after.items():
        earlier = before.get(pid)
        totals[label] += seconds - (earlier[1] if earlier is not None and earlier[0] == label else 0.0)
    return totals
