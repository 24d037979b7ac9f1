"""lab/host/procstat.py: what the host and the process did to a thread over a round, from a /proc tree (a fake one
here, and the real one where there is one), and lab.host.cpuplace's pinning of the calling thread."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from lab.host import cpuplace, procstat


def _stat_line(cpu: int) -> str:
    fields = ["S"] + ["0"] * 35 + [str(cpu)] + ["0"] * 5  # field 39 (the CPU) is the 37th after the name
    return "1234 (py thon) " + " ".join(fields)


def _proc(root: Path, cpu: int, mine: tuple[int, int], others: list[int], steal: int) -> Path:
    me = threading.get_native_id()
    (root / "thread-self").mkdir(parents=True, exist_ok=True)
    (root / "thread-self" / "stat").write_text(_stat_line(cpu))
    (root / "thread-self" / "schedstat").write_text(f"{mine[0]} {mine[1]} 7\n")
    for tid, run_ns in [(me, mine[0]), *((10_000 + i, ns) for i, ns in enumerate(others))]:
        (root / "self" / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
        (root / "self" / "task" / str(tid) / "schedstat").write_text(f"{run_ns} 0 1\n")
    rows = [f"cpu{c} 1 2 3 4 5 6 7 {steal if c == cpu else 99} 0 0" for c in range(4)]
    (root / "stat").write_text("cpu  9 9 9 9 9 9 9 9 0 0\n" + "\n".join(rows) + "\n")
    return root


def test_between_two_snapshots_is_the_wait_the_other_threads_and_the_steal(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    a = procstat.snapshot(_proc(root, 2, (5_000_000, 1_000_000), [1_000_000, 2_000_000], 10))
    b = procstat.snapshot(_proc(root, 2, (9_000_000, 4_500_000), [1_000_000, 6_000_000], 13))
    got = procstat.between(a, b)
    assert got["cpu"] == 2 and got["wait_ms"] == pytest.approx(3.5) and got["others_ms"] == pytest.approx(4.0)
    assert got["steal_ms"] == pytest.approx(3 * procstat.TICK_MS)  # the thread's own run time is not "others"


def test_a_thread_that_moved_cpu_has_no_steal_and_an_unreadable_proc_gives_none(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    a = procstat.snapshot(_proc(root, 1, (0, 0), [], 10))
    b = procstat.snapshot(_proc(root, 3, (0, 0), [], 12))
    assert procstat.between(a, b)["steal_ms"] is None
    nothing = procstat.snapshot(tmp_path / "absent")
    assert nothing == procstat.Snapshot(None, None, None, None)
    assert procstat.between(nothing, nothing) == {"cpu": None, "wait_ms": None, "others_ms": None, "steal_ms": None}


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="needs Linux's /proc schedstat")
def test_the_real_proc_counts_a_busy_other_thread() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    a = procstat.snapshot()
    worker = threading.Thread(target=spin)
    worker.start()
    threading.Event().wait(0.2)
    b = procstat.snapshot()  # while the worker lives: a thread that ended is no longer in /proc/self/task
    stop.set()
    worker.join()
    got = procstat.between(a, b)
    assert got["others_ms"] is not None and got["others_ms"] > 0 and got["wait_ms"] is not None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_pinned_binds_the_calling_thread_and_restores_it() -> None:
    before = cpuplace.allowed()
    assert before is not None
    target = before[-1]
    with cpuplace.pinned(target) as on:
        assert on == target and cpuplace.allowed() == (target,)
    assert cpuplace.allowed() == before


def test_pinned_to_nothing_or_a_cpu_not_allowed_changes_nothing() -> None:
    before = cpuplace.allowed()
    with cpuplace.pinned(None) as on:
        assert on is None and cpuplace.allowed() == before
    with cpuplace.pinned(cpuplace.MAX_CPU) as on:
        assert on is None and cpuplace.allowed() == before
    assert sys.platform != "linux" or before is not None
