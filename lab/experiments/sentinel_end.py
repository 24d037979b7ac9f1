"""sentinel_end: the run's own eager judged by fresh processes that take turns with it, and what the host did.

The same child as `sentinel` (lab.experiments.sentinel) warms up and measures eager and graph replay
at batch 1 in fp32 after every other experiment (`sentinel_step_ms` with `when=end`, its `warmup.end`
note, its check "the sentinel's rounds were steady (end)"). A second fresh process imports meanwhile
and warms up (eager, half the budget) only after that take, so that no two processes share the GPU
while one is measured. Then both stay alive (lab.run.turns) and take turns with the run's own process,
which has compiled, captured and profiled for minutes: `pairs` cycles of one eager round of
`pair_steps` steps a side, the order rotated every cycle, each round between two samples of the
host-speed index (lab.measure.hostspeed). All see the same host at the same minute, so a host that
got slower slows all; what is left is what the run did to its own process. All are pinned to one CPU
for the cycles (the run's thread's; restored after): on an H200 host the run's thread and the child's
sat on different CPUs, and in the same minute the index's own loop ran 1.7x slower on the run's, so
the ratio measured two cores, not the lab. Each round also says what the host and the process did
(lab.host.procstat: the thread's run-queue wait, the CPU time of its process's other threads, the
hypervisor's steal) in the `paired_rounds` note, with every step, and in the check's detail.

Why two fresh processes: two processes that did nothing differ by themselves. Pinned to one H200
CPU, 30 cycles of 32 steps: three fresh processes within 1.5% of each other in one trial, 4.7%
(0.953 [0.916, 0.971]) and 4.4% apart in another; a process that had run one CPU-only profiler session
was 18-30% slower, one that had run a CPU+CUDA session (CUPTI torn down) was not. So the control is the
two fresh processes' geometric mean per cycle (a process's own luck weighs half), and their own ratio,
`fresh_over_fresh` with its interval, is the instrument's resolution, stated beside the verdict.

- `in_run_over_fresh` (params method eager, batch 1, fp32): the median over cycles of the run's round
  median over the control's, with its 95% interval (a bootstrap over the cycles:
  lab.contract.intervals.pair_ratio: per cycle, as the host's speed flips within seconds; 12 rounds of
  64 steps had put two fresh processes 11% apart by their pooled medians, 3.6% per pair). The
  instrument is clean when the ratio is within 5% of 1 or its interval holds 1
  (lab.contract.hostspeed.in_run_clean); otherwise the non-fatal check "in-run eager within 5% of
  interleaved fresh processes" fails: that is the lab's doing (a profiler's residue, a leak).
- `in_run_over_sentinel` (eager, graph): cuda_graph_decode's own step over the start sentinel's, and
  `sentinel_drift`, the end sentinel's over the start's: data, not checks. Minutes apart on a shared
  host they measure the host as much as the lab (an H200 host moved eager 2x from minute to minute
  while graph replay did not move); a drift beyond 10% is reported as a host warning, with the host
  index at both ends, never as a failed check.

Why at the end and not children alive for the whole run: the comparison needs the processes side by
side, not the run's timeline, and a child that lived through the run would share the GPU with every
experiment.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from lab import console
from lab.contract import hostspeed
from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Param as P
from lab.contract.options import option
from lab.contract.hostspeed import Estimate
from lab.contract.reasons import Code
from lab.contract import query
from lab.experiments import sentinel
from lab.experiments.common.hostspeed import put
from lab.experiments.sentinel import METHODS, sentinel_ms
from lab.host import cpuplace, procstat
from lab.measure import profiler_guard
from lab.measure.hostspeed import HostIndex
from lab.run import turns
from lab.run.context import Context

DRIFT = 0.10  # a fresh process's step that moved more than this between the start and the end: a host warning
PAIRED: dict[str, Any] = {P.METHOD: Method.EAGER, P.BATCH: 1, P.DTYPE: "float32"}


@dataclass(frozen=True)
class Options(sentinel.Options):
    pairs: int = option(24, "cycles of eager rounds, one of each fresh child and of the run's own, in rotating order")
    pair_steps: int = option(32, "decode steps in each paired round: shorter rounds, more pairs (the ratio is taken "
                                 "per pair, and a host's speed flips within seconds)")


IN_RUN, FRESH, SECOND = "in-run", "fresh", "fresh-2"  # the sides: the run's own process, the fresh children


@dataclass
class Paired:
    """Each side's rounds in cycle order, the host index around each, what the host did in each (lab.host.procstat)
    and the CPU each side was pinned to (None: not pinned)."""

    rounds: dict[str, list[list[float]]] = field(default_factory=dict)
    index: HostIndex = field(default_factory=HostIndex)
    host: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pinned: dict[str, int | None] = field(default_factory=dict)

    @property
    def in_run(self) -> list[list[float]]:
        return self.rounds.get(IN_RUN, [])

    @property
    def fresh(self) -> list[list[float]]:
        """The control, one value a cycle: the fresh child's round median, or with a second fresh child the geometric
        mean of the two (a process's own luck, a few percent, weighs half)."""
        if SECOND not in self.rounds:
            return self.rounds.get(FRESH, [])
        return [[math.sqrt(statistics.median(a) * statistics.median(b))]
                for a, b in zip(self.rounds[FRESH], self.rounds[SECOND], strict=True)]

    def ratio(self) -> tuple[float, intervals.Interval | None]:
        """The median over cycles of the run's round over the control's (lab.contract.intervals.pair_ratio)."""
        return intervals.pair_ratio(self.in_run, self.fresh)

    def resolution(self) -> tuple[float, intervals.Interval | None] | None:
        """The two fresh children's own paired ratio (None with one child)."""
        return intervals.pair_ratio(self.rounds[FRESH], self.rounds[SECOND]) if SECOND in self.rounds else None

    def note(self) -> dict[str, Any]:
        """The `paired_rounds` note: the pinning, per side and round what the host did, and every step (ms)."""
        return {"pinned": self.pinned, "rounds": self.host,
                "samples_ms": {side: [[round(x, 5) for x in r] for r in rs] for side, rs in self.rounds.items()}}

    def host_text(self) -> str:
        """The per-round host figures, side by side, as medians: run-queue wait, the run's other threads, steal."""
        parts = []
        for key, what in (("wait_ms", "waited for the CPU"), ("others_ms", "other threads used"),
                          ("steal_ms", "the hypervisor stole")):
            medians = {side: _median_of(rounds, key) for side, rounds in self.host.items()}
            if all(v is not None for v in medians.values()):
                parts.append(f"{what} " + " / ".join(f"{v:.3g} ms ({side})" for side, v in medians.items()))
        return "; per round, the median thread " + ", ".join(parts) if parts else ""


def _median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def alternate(own: Callable[[], list[float]], fresh: dict[str, Callable[[], dict[str, Any]]], cycles: int,
              index: HostIndex | None = None) -> Paired:
    """`cycles` cycles of one round a side, the order rotated every cycle (a child first, the run's own next, ...; so
    a host that drifts within a cycle favours no side). Each of `fresh` returns its child's answer: its samples, its
    index before and after (`index`) and what the host did (`host`, optional)."""
    out = Paired(index=index or HostIndex())
    sides = [FRESH, IN_RUN, *(s for s in fresh if s != FRESH)]
    for i in range(cycles):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:
            with console.timed(f"{side} eager, cycle {i + 1}"):  # the console keeps quiet while a child times too
                if side == IN_RUN:
                    start = procstat.snapshot()  # outside the index's samples and the round's timing
                    samples = out.index.turn(IN_RUN, own, share=False)
                    host = procstat.between(start, procstat.snapshot())
                else:
                    answer = fresh[side]()
                    out.index.add(side, *answer["index"])
                    samples, host = answer["samples"], answer.get("host") or {}
            out.rounds.setdefault(side, []).append(samples)
            out.host.setdefault(side, []).append(host)
    return out


def record_paired(ctx: Context[Options], paired: Paired) -> bool:
    """`in_run_over_fresh` (and `fresh_over_fresh`) with intervals, the index and rounds notes, and the verdict."""
    ratio, ci = paired.ratio()
    put(ctx, M.IN_RUN_OVER_FRESH, Estimate(ratio, ci), 4, **PAIRED)
    ctx.note(N.HOST_INDEX.key_for(shape="paired"), paired.index.note())
    ctx.note(N.PAIRED_ROUNDS.key, paired.note())
    own_index, fresh_index = paired.index.per_round(IN_RUN), paired.index.per_round(FRESH)
    moved = hostspeed.spread_ratio([x for side in paired.rounds for x in paired.index.per_round(side)])
    clean = hostspeed.in_run_clean(ratio, ci)
    inside = "" if ci is None else f" {ci.text()}"
    host = "" if moved is None else f"; the host index moved {moved:.2f}x (p95/p5) over the cycles"
    if own_index and fresh_index:
        loop = statistics.median(a / b for a, b in zip(own_index, fresh_index))
        host += f", the index's own in-run over fresh {loop:.2f}x per cycle"
    twin = paired.resolution()
    if twin is not None:
        put(ctx, M.FRESH_OVER_FRESH, Estimate(*twin), 4, **PAIRED)
        inside += (f"; two fresh processes differed {twin[0]:.3f}x" + ("" if twin[1] is None else f" {twin[1].text()}")
                   + " (the instrument's resolution)")
    cpus = set(paired.pinned.values())
    where = f"; every side pinned to CPU {cpus.pop()}" if len(cpus) == 1 and None not in cpus else "; not pinned"
    detail = (f"{len(paired.in_run)} cycles: in-run {statistics.median(x for r in paired.in_run for x in r):.4g} ms, "
              f"fresh {statistics.median(x for r in paired.fresh for x in r):.4g} ms, ratio {ratio:.3f}x per cycle"
              f"{inside}{host}{where}{paired.host_text()}")
    return ctx.check("in-run eager within 5% of interleaved fresh processes (or its interval holds 1)", clean,
                     detail=detail, fatal=False, **PAIRED)


def ask_round(child: turns.Turns) -> dict[str, Any]:
    """One eager round of the paired child (lab.experiments.sentinel.serve's answer)."""
    return child.ask({"round": True})


def _own_eager(ctx: Any) -> Callable[[], list[float]]:
    """The run's own eager step at batch 1 in fp32, on the child's prompt (same seed), one round a call."""
    import torch

    from lab.step import methods as stepmethods

    prof = ctx.profile
    _, w = ctx.gpt2("float32")
    g = torch.Generator().manual_seed(1001)
    prompt = torch.randint(0, prof.model.vocab_size, (1, prof.prompt_len), generator=g).to(ctx.device)
    m = stepmethods.build(Method.EAGER, w, prompt, prof.max_len, warmup=3)
    steps = min(ctx.options.pair_steps, sentinel.steps_of(ctx))
    return lambda: m.decode(steps, ctx.clock, readback=False)


def measure_paired(ctx: Any) -> Paired | None:
    """Start the two children, record the first's take (`when=end`), let the second warm up after it, then take turns
    with both; None if a child failed."""
    ctx.progress("sentinel (end): two fresh processes, then eager rounds taking turns with the run's own")
    steps = min(ctx.options.pair_steps, sentinel.steps_of(ctx))
    kwargs = sentinel.child_kwargs(ctx) | {"pair_steps": steps}
    second = kwargs | {"gate": True, "methods": [Method.EAGER], "min_s": ctx.options.warmup_s / 2,
                       "budget_s": ctx.options.budget_s / 2}
    with turns.Turns(sentinel.CHILD, kwargs, timeout_s=ctx.options.timeout_s) as child, \
            turns.Turns(sentinel.CHILD, second, timeout_s=ctx.options.timeout_s) as twin:
        try:
            sentinel.record_take(ctx, child.wait()["ready"], "end")
            fresh = {FRESH: child}
            try:
                twin.ask({"go": True})  # it imported meanwhile; it touches the GPU only now, after the take
                fresh[SECOND] = twin
            except turns.ChildGone as exc:  # the verdict then rests on one fresh process, and says so
                ctx.check("the second fresh process warmed up (end)", False, fatal=False,
                          detail=f"{exc}: {twin.finish().describe()}; the verdict has no resolution")
            own = _own_eager(ctx)
            own()  # the run's own build warmed (its process is warm already)
            profiler_guard.check_clean("the paired rounds of sentinel_end")
            with cpuplace.pinned(cpuplace.thread_cpu()) as cpu:  # every side on one CPU: the same core's speed
                pinned = {IN_RUN: cpu, **{side: None if cpu is None else c.ask({"pin": cpu})["pinned"]
                                          for side, c in fresh.items()}}
                paired = alternate(own, {side: functools.partial(ask_round, c) for side, c in fresh.items()},
                                   ctx.options.pairs)
            paired.pinned = pinned
        except turns.ChildGone as exc:
            res = child.finish()
            ctx.check("the sentinel child measured the step (end)", False, detail=f"{exc}: {res.describe()}",
                      fatal=True)
            return None
        child.finish()
        twin.finish()
    return paired


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
                sentinel.host_warning(ctx, f"the fresh-process {method} step moved {moved:.2f}x over the run "
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
        paired = measure_paired(ctx)
        if paired is not None:
            record_paired(ctx, paired)
    drift(ctx)
