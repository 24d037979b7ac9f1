"""What the host and the process itself did to a thread over one round, read from Linux's /proc around it.

A round of eager in the run's own process can be slower than the same round in a fresh one for the
host's reasons (the thread waited for its CPU, the hypervisor stole the CPU) or for the lab's (another
thread of the measuring process used the CPU meanwhile: a profiler's, a logger's, a compile worker's).
So a paired round (lab.experiments.sentinel_end) is read between two `Snapshot`s, taken outside the
timing, and `between` says per round:

- `cpu`: the CPU the thread ended the round on (/proc/thread-self/stat, field 39);
- `wait_ms`: the time the thread was runnable but waiting for a CPU (/proc/thread-self/schedstat's second
  field, the scheduler's run-queue delay): the host's, or a sibling process's, contention;
- `others_ms`: the CPU time the process's other threads used meanwhile (their schedstat's first field):
  the lab's own background work during the measurement;
- `steal_ms`: the time the hypervisor ran something else on the round's CPU (/proc/stat's steal column of
  that CPU, in clock ticks, so in steps of 10 ms on most kernels).

Elsewhere (no /proc) every field is None: never a guess.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from lab.host.cpuplace import thread_cpu

PROC = Path("/proc")
TICK_MS = 1000 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100)


def _schedstat(path: Path) -> tuple[int, int] | None:
    """(ns on the CPU, ns waiting for one) from a schedstat file; None where it cannot be read."""
    try:
        run_ns, wait_ns, *_ = path.read_text().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


def _others_ns(proc: Path, me: int) -> int | None:
    """The CPU time, in ns, of every thread of this process but `me` (threads that ended meanwhile are not counted)."""
    try:
        tids = [p.name for p in (proc / "self" / "task").iterdir() if p.name != str(me)]
    except OSError:
        return None
    return sum(s[0] for s in (_schedstat(proc / "self" / "task" / t / "schedstat") for t in tids) if s is not None)


def _steal_ticks(proc: Path, cpu: int | None) -> int | None:
    """The steal column of `cpu`'s line in /proc/stat (clock ticks)."""
    if cpu is None:
        return None
    try:
        for line in (proc / "stat").read_text().splitlines():
            fields = line.split()
            if fields and fields[0] == f"cpu{cpu}":
                return int(fields[8]) if len(fields) > 8 else None
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class Snapshot:
    cpu: int | None
    wait_ns: int | None
    others_ns: int | None
    steal_ticks: int | None


def snapshot(proc: Path = PROC) -> Snapshot:
    """The calling thread's CPU and run-queue wait, its process's other threads' CPU time, its CPU's steal."""
    cpu = thread_cpu(proc / "thread-self" / "stat")
    mine = _schedstat(proc / "thread-self" / "schedstat")
    return Snapshot(cpu, None if mine is None else mine[1], _others_ns(proc, threading.get_native_id()),
                    _steal_ticks(proc, cpu))


def between(a: Snapshot, b: Snapshot) -> dict[str, float | int | None]:
    """What happened from `a` to `b` (the module docstring's fields; None where either side could not be read). The
    steal is read on `b`'s CPU at both ends: a thread that moved CPU meanwhile gets None."""

    def ms(x: int | None, y: int | None, scale: float) -> float | None:
        return None if x is None or y is None else round((y - x) * scale, 3)

    same = a.cpu is not None and a.cpu == b.cpu
    return {"cpu": b.cpu, "wait_ms": ms(a.wait_ns, b.wait_ns, 1e-6), "others_ms": ms(a.others_ns, b.others_ns, 1e-6),
            "steal_ms": ms(a.steal_ticks, b.steal_ticks, TICK_MS) if same else None}
