"""The profiler's residue, guarded: every torch.profiler session of the lab, and no timing after one that stuck.

Why. On an H200 with torch 2.11 + CUDA 13, one `torch.profiler` session with CUDA activity left CUPTI
attached to the process: every later eager step was 27-35% slower (a per-launch host cost; graph
replay, one launch per step, was unchanged). Kineto finalises CUPTI when a session ends only when
the environment says `TEARDOWN_CUPTI=1` at that moment (pytorch/pytorch#144455), and torch's profiler
sets it to "0" itself when it starts while Inductor's global `triton.cudagraphs` is on (and CUDA is
older than 12.6, or lazy re-init is not allowed): `torch/profiler/profiler.py`, `prepare_trace`.

What the lab does, three layers deep:
1. `session()` is the lab's only way into torch.profiler. Before a session with CUDA activity it sets
   `TEARDOWN_CUPTI=1` (unless the user set it), and after the session it reads the variable again:
   if it is not "1" (torch flipped it, or the user chose "0"), CUPTI stayed attached and the process
   is marked as carrying a residue, with the reason.
2. Every timing entry point of the lab (`lab.measure.timing.time_calls`, `rotating_rounds`) calls
   `check_clean()` first: after a residue it raises `ProfilerResidue` naming the session that left it,
   so no number taken after it is ever recorded (the runner records it as a failed fatal check).
3. Experiments time first and profile last (cuda_graph_decode profiles every batch after timing all
   of them), so even a residue the lab cannot see does not reach their own timings; a CPU test
   (`strict()`: every session counts as a residue) fails if any experiment times after profiling.

A profile with CPU activity only attaches no CUPTI, and the guard does not count it as a residue; but on an H200
host (torch 2.11, 2026-12-02) a CUDA process that had run one CPU-only session of 50 ops was 18-30% slower at
eager than fresh processes taking turns with it on the same CPU, while one that had run a CPU+CUDA session with
CUPTI torn down was not. GPU runs profile with CUDA activity only. On a CPU host (torch 2.13 CPU, 2 cores,
2026-12-04) CPU-only sessions left nothing measurable: `python -m lab residue` (lab.commands.residue, the sentinel's
paired rounds before and after 3 sessions) moved GPT-2 124M's eager step 0.998x [0.994, 1.002] against 0.993x
[0.989, 0.997] with no session, and a tiny model's 0.996x [0.968, 1.026] against 0.997x [0.961, 1.032].
The lab's fresh-process sentinel (lab.experiments.sentinel) measures the same step outside the run at
its start and end, so a residue this module cannot see would still show as in-run over sentinel.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

TEARDOWN = "TEARDOWN_CUPTI"
STRICT_ENV = "LAB_PROFILER_STRICT"  # "1": every session counts as a residue (the CPU test of the ordering)


class ProfilerResidue(RuntimeError):
    """A timing was asked for after a profiler session left CUPTI attached in this process."""


@dataclass(frozen=True)
class Session:
    label: str
    cuda: bool
    torn_down: bool  # CUPTI finalised at the end (or never attached: CPU only)
    at: float  # perf_counter at the session's end


@dataclass
class Guard:
    sessions: list[Session] = field(default_factory=list)
    residue: str | None = None  # why the process carries a residue (None: clean)

    def reset(self) -> None:
        self.sessions.clear()
        self.residue = None


GUARD = Guard()


def is_strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


@contextlib.contextmanager
def session(label: str, cuda: bool, **profile_kwargs: Any) -> Iterator[Any]:
    """A torch.profiler session (CPU activity, plus CUDA's when `cuda`), recorded and checked for its residue."""
    from torch.profiler import ProfilerActivity, profile

    user_choice = os.environ.get(TEARDOWN)
    if cuda and user_choice is None:
        os.environ[TEARDOWN] = "1"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities, **profile_kwargs) as prof:
            yield prof
    finally:
        value = os.environ.get(TEARDOWN)
        torn_down = (not cuda) or value == "1"
        GUARD.sessions.append(Session(label, cuda, torn_down, time.perf_counter()))
        if not torn_down and GUARD.residue is None:
            who = "set by the user" if user_choice == value else "set by torch's profiler (Inductor's triton.cudagraphs " \
                                                                  "was on when it started)"
            GUARD.residue = (f"the profiler session '{label}' ended with {TEARDOWN}={value!r} ({who}): CUPTI stays "
                             "attached and slows every later eager launch in this process")
        elif is_strict() and GUARD.residue is None:
            GUARD.residue = f"the profiler session '{label}' ran in this process ({STRICT_ENV}=1: every session counts)"


def experiment_started(experiment_id: str) -> None:
    """The runner starts an experiment. Under `strict()` the residue is scoped to one experiment (the CPU test
    checks each experiment's own order: time first, profile last); a real residue stays for the process."""
    if is_strict():
        GUARD.residue = None


def unit_started(label: str) -> None:
    """A measurement of its own starts inside an experiment (a sweep's next shape, diagnose's next target: built
    afresh, timed, then profiled). Under `strict()` the ordering is checked per unit, as per experiment; a real
    residue (CUPTI left attached) still refuses every later timing of the process."""
    experiment_started(label)


def check_clean(what: str) -> None:
    """Refuse a timing after a residue: raises ProfilerResidue naming the timing and the session that left it."""
    if GUARD.residue is not None:
        raise ProfilerResidue(f"{what} refused: {GUARD.residue}; timings come before profiling (or in a fresh "
                              "process)")


def state() -> dict[str, Any]:
    """What the guard saw in this process, for a record's notes."""
    return {"sessions": len(GUARD.sessions), "cuda_sessions": sum(s.cuda for s in GUARD.sessions),
            "residue": GUARD.residue, TEARDOWN: os.environ.get(TEARDOWN)}
