"""sentinel_end: the run's own eager judged against the same fresh processes at its start and its end.

The two fresh processes the start sentinel kept open (lab.experiments.sentinel.measure_paired) warm up and take
again at the end: the first's take is `sentinel_step_ms` with `when=end`, its `warmup.end` note and its check
"the sentinel's rounds were steady (end)". Then both take turns with the run's own process, which has compiled,
captured and profiled for minutes: `pairs` cycles of one eager round of `pair_steps` steps a side, the order
rotated every cycle, each round between two samples of the host-speed index (lab.measure.hostspeed), every side
pinned to one CPU (the start's, where the run may still use it; restored after): on an H200 host the
run's thread and the child's sat on different CPUs, and in the same minute the index's own loop ran 1.7x
slower on the run's, so the ratio measured two cores, not the lab. Each round also says what the host and
the process did (lab.host.procstat: the thread's run-queue wait, the CPU time of its process's other threads,
the hypervisor's steal) in the `paired_rounds` note.
The rounds and the ratio's figures are lab.experiments.common.paired's.

- `in_run_over_fresh` (params method eager, batch 1, fp32), here and in the start sentinel's record: the median
  over cycles of the run's round median over the two fresh processes' (their geometric mean), with its 95%
  interval (a bootstrap over the cycles, lab.contract.intervals.pair_ratio); `fresh_over_fresh`, the two fresh
  processes' own ratio, is the instrument's resolution.
- `in_run_change`: the end's ratio over the start's, with its interval (the two sets of cycles drawn each on
  its own, lab.contract.intervals.ratio_interval): what the run did to its own process. Why not the end's ratio
  alone: a process differs from another by itself (its memory layout, its threads, its imports: three fresh H200
  processes were 1.5-4.7% apart), and the run's process at the start, before any experiment, carries that too. On
  the H200 on 2026-12-02 one whole gpu run ended at 1.069 [1.060, 1.077] while its fresh processes differed by
  1.010; another, with the same experiments, ended at 1.021 [1.014, 1.032] and had started at 1.010. Against the
  same two processes at both ends, the process's own constant part cancels, theirs too; what is left moved during
  the run. The instrument is clean when `in_run_change` is within 5% of 1 or its interval holds 1
  (lab.contract.hostspeed.in_run_clean); otherwise the non-fatal check "in-run eager within 5% of where it started,
  against the same fresh processes" fails: that is the lab's doing (a profiler's residue, a leak). Where the start
  kept no processes (a run of sentinel_end alone, a resumed run), two new ones are started at the end and the
  verdict is the end's ratio alone: "in-run eager within 5% of interleaved fresh processes". `fresh_change`, the
  two fresh processes' own change over the run, is the verdict's resolution; beyond 5%, a host warning.
- `in_run_over_sentinel` (eager, graph): cuda_graph_decode's own step over the start sentinel's, and
  `sentinel_drift`, the end sentinel's over the start's: data, not checks. Minutes apart on a shared host they
  measure the host as much as the lab (an H200 host moved eager 2x from minute to minute while graph replay did
  not move); a drift beyond 10% is reported as a host warning, with the host index at both ends, never as a
  failed check.

Why the two processes wait idle through the run rather than start at the end: the same processes at both ends
cancel their own luck as the run's own cancels. They hold a CUDA context and GPT-2's weights (about 1 GB each on
the GPU) and launch nothing between the two ends.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from lab.contract import hostspeed
from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.hostspeed import Estimate
from lab.contract.names import Experiment
from lab.contract.reasons import Code
from lab.contract import query
from lab.experiments import sentinel
from lab.experiments.common import paired
from lab.experiments.common.hostspeed import host_warning, put
from lab.experiments.sentinel import METHODS, sentinel_ms
from lab.run import turns
from lab.run.context import Context

DRIFT = 0.10  # a fresh process's step that moved more than this between the start and the end: a host warning


@dataclass(frozen=True)
class Options(sentinel.Options):
    """The sentinel's options (the same two processes take at both ends)."""


def _start_paired(ctx: Context[Options]) -> paired.Paired | None:
    """The start sentinel's paired rounds where they were taken with the processes that took turns at the end."""
    for rec in ctx.results.experiments:
        note = rec.notes.get(N.PAIRED_ROUNDS.key) if rec.id == Experiment.SENTINEL else None
        if isinstance(note, dict):
            return paired.Paired.from_note(note)
    return None


def record_paired(ctx: Context[Options], end: paired.Paired, start: paired.Paired | None = None) -> bool:
    """The end's figures (lab.experiments.common.paired.record), `in_run_change` where `start` holds the same
    processes' rounds at the start, and the verdict."""
    detail = paired.record(ctx, end)
    ratio, ci = end.ratio()
    if start is None or not start.cycle_ratios():
        return ctx.check("in-run eager within 5% of interleaved fresh processes (or its interval holds 1)",
                         hostspeed.in_run_clean(ratio, ci), detail=detail, fatal=False, **paired.PARAMS)
    began, began_ci = start.ratio()
    change = _change(end.cycle_ratios(), start.cycle_ratios())
    put(ctx, M.IN_RUN_CHANGE, change, 4, **paired.PARAMS)
    moved = (f"{change.value:.3f}x" + ("" if change.interval is None else f" {change.interval.text()}") + " over the "
             f"run: at the start the run's process was {began:.3f}x the same fresh processes" + (
                 "" if began_ci is None else f" {began_ci.text()}") + twin_change(ctx, end, start) + ", at the end ")
    return ctx.check("in-run eager within 5% of where it started, against the same fresh processes (or its "
                     "interval holds 1)", hostspeed.in_run_clean(change.value, change.interval), detail=moved + detail,
                     fatal=False, **paired.PARAMS)


def _change(last: list[float], first: list[float]) -> Estimate:
    """The end's paired ratio over the start's from each end's cycle ratios (an end's ratio: the median of its
    cycles'), the two ends' cycles drawn each on its own."""
    return Estimate(statistics.median(last) / statistics.median(first),
                    intervals.ratio_interval([[r] for r in last], [[r] for r in first], paired=False))


def twin_change(ctx: Any, end: paired.Paired, start: paired.Paired) -> str:
    """`fresh_change`, the two fresh processes' own change over the run (the resolution of `in_run_change`: they did
    nothing), for the verdict's detail; beyond 5% with an interval that excludes 1, a host warning: the host moved
    two idle processes apart by more than the verdict's tolerance (on the H200 on 2026-12-03, 1.059x over a run
    whose host slowed eager 2x)."""
    last, first = end.cycle_ratios(twin=True), start.cycle_ratios(twin=True)
    if not (first and last):
        return ""
    fresh = _change(last, first)
    put(ctx, M.FRESH_CHANGE, fresh, 4, **paired.PARAMS)
    text = f"{fresh.value:.3f}x" + ("" if fresh.interval is None else f" {fresh.interval.text()}")
    if not hostspeed.in_run_clean(fresh.value, fresh.interval):
        host_warning(ctx, f"the two fresh processes, idle through the run, moved {text} apart over it: "
                          "beyond the 5% the instrument's verdict allows")
    return f"; the two fresh processes' own change {text} (the resolution)"


def _in_run_ms(records: list[Any], method: str) -> float | None:
    rec, failed = query.measured(records, Experiment.CUDA_GRAPH_DECODE)
    if rec is None or (method, 1, "float32") in failed:
        return None
    m = rec.find(M.STEP_MS.name, method=method, batch=1, dtype="float32", readback=False)
    return None if m is None else float(m.value)


def _index_median(records: list[Any], when: str) -> float | None:
    """The median host index of the fresh process's kept rounds at `when` (None: none noted)."""
    for rec in records:
        warm = rec.notes.get(N.WARMUP.key_for(when=when)) if rec.id in (Experiment.SENTINEL, Experiment.SENTINEL_END) else None
        if warm and warm.get("index_ms"):
            kept = [x for name, xs in warm["index_ms"].items() if not name.startswith("warmup") for x in xs]
            return statistics.median(kept) if kept else None
    return None


def drift(ctx: Any) -> None:
    """The start and end sentinels and cuda_graph_decode's own step, minutes apart: data, and host warnings."""
    records = ctx.results.experiments
    for method in METHODS:
        start, end = sentinel_ms(records, method, "start"), sentinel_ms([ctx.record], method, "end")
        if start is None:
            continue
        if end is not None:
            moved = end / start
            ctx.metric(M.SENTINEL_DRIFT, round(moved, 4), method=method)
            if abs(moved - 1) > DRIFT:
                i0, i1 = _index_median(records, "start"), _index_median([ctx.record], "end")
                index = (f"; the host index {i0:.3g} ms at the start, {i1:.3g} ms at the end ({i1 / i0:.2f}x)"
                         if i0 and i1 else "")
                host_warning(ctx, f"the fresh-process {method} step moved {moved:.2f}x over the run "
                                  f"(start {start:.4g} ms, end {end:.4g} ms){index}")
        in_run = _in_run_ms(records, method)
        if in_run is not None:
            ctx.metric(M.IN_RUN_OVER_SENTINEL, round(in_run / start, 4), method=method)


def run(ctx: Context[Options]) -> None:
    if not turns.supported():  # Windows: the end sentinel alone, and no paired verdict (said as a skipped part)
        ctx.skip("in_run_over_fresh", Code.LINUX_HOST_REQUIRED, "the paired fresh process passes its pipes by file "
                                                                "descriptor (lab.run.turns): POSIX only")
        sentinel.measure(ctx, "end")
    else:
        start = _start_paired(ctx) if all(ctx.kept(key) is not None for key in sentinel.KEPT) else None
        end = sentinel.measure_paired(ctx, "end", None if start is None else start.pinned.get(paired.IN_RUN))
        if end is not None:
            record_paired(ctx, end, start)
    drift(ctx)
