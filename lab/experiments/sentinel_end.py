"""sentinel_end: the run's own eager judged by a fresh process that takes turns with it, and what the host did.

The same child as `sentinel` (lab.experiments.sentinel) warms up and measures eager and graph replay
at batch 1 in fp32 after every other experiment (`sentinel_step_ms` with `when=end`, its `warmup.end`
note, its check "the sentinel's rounds were steady (end)"). Then it stays alive (lab.run.turns) and
alternates rounds of eager with the run's own process, which has compiled, captured and profiled for
minutes: `pairs` pairs, the child's round first in even pairs and the run's first in odd ones, each
round between two samples of the host-speed index (lab.measure.hostspeed). Both see the same host at
the same minute, so a host that got slower slows both; what is left is what the run did to its own
process. Both are pinned to one CPU for the pairs (the one the run's thread is on; restored after):
on an H200 host the run's thread and the child's sat on different CPUs, and in the same minute the
index's own loop ran 1.7x slower on the run's (0.75-0.83 ms against 0.45), so the paired ratio
measured the two cores, not the lab. Each round also says what the host and the process did meanwhile
(lab.host.procstat: the thread's run-queue wait, the CPU time of the process's other threads, the
hypervisor's steal), in the `paired_rounds` note and the check's detail: a slower in-run side whose
other threads were busy is the lab's doing, one that waited for its CPU is the host's.

- `in_run_over_fresh` (params method eager, batch 1, fp32): the median over pairs of the run's round
  median over the child's, with its 95% interval (a bootstrap over the pairs:
  lab.contract.intervals.pair_ratio); `pairs` pairs of `pair_steps` steps each (24 of 32: many short
  pairs, as the host's speed flips within seconds; three fresh processes pinned to one CPU agreed within
  1.5% so, where 12 rounds of 64 steps had put two of them 11% apart by their pooled medians).
  The instrument is clean when the ratio is within 5% of 1 or its interval holds 1
  (lab.contract.hostspeed.in_run_clean); otherwise the non-fatal check "in-run eager within 5% of an
  interleaved fresh process" fails: that is the lab's doing (a profiler's residue, a leak).
- `in_run_over_sentinel` (eager, graph): cuda_graph_decode's own step over the start sentinel's, and
  `sentinel_drift`, the end sentinel's over the start's: data, not checks. Minutes apart on a shared
  host they measure the host as much as the lab (an H200 host moved eager 2x from minute to minute
  while graph replay did not move); a drift beyond 10% is reported as a host warning, with the host
  index at both ends, never as a failed check.

Why the simplest paired design (one child, alternating rounds at the end) and not a child alive for the
whole run: the comparison needs the two processes side by side, not the whole run's timeline, and a
child that lived through the run would share the GPU with every experiment.
"""

from __future__ import annotations

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
from lab.contract.reasons import Code
from lab.contract import query
from lab.experiments import sentinel
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
    pairs: int = option(24, "pairs of eager rounds, the fresh child's and the run's own, alternating")
    pair_steps: int = option(32, "decode steps in each paired round: shorter rounds, more pairs (the ratio is taken "
                                 "per pair, and a host's speed flips within seconds)")


@dataclass
class Paired:
    """The run's own rounds and the fresh child's, in pair order, the host index around each, what the host did in each
    (lab.host.procstat, per side) and the CPU both sides were pinned to (None: not pinned)."""

    in_run: list[list[float]] = field(default_factory=list)
    fresh: list[list[float]] = field(default_factory=list)
    index: HostIndex = field(default_factory=HostIndex)
    host: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"in-run": [], "fresh": []})
    pinned: dict[str, int | None] = field(default_factory=dict)

    def ratio(self) -> float:
        """The median over pairs of the run's round over the child's (lab.contract.intervals.pair_ratio)."""
        return intervals.pair_ratio(self.in_run, self.fresh)[0]

    def interval(self) -> intervals.Interval | None:
        return intervals.pair_ratio(self.in_run, self.fresh)[1]

    def note(self) -> dict[str, Any]:
        """The `paired_rounds` note: the pinning, per side and round what the host did, and every step (ms)."""
        return {"pinned": self.pinned, "rounds": self.host,
                "samples_ms": {"in-run": [[round(x, 5) for x in r] for r in self.in_run],
                               "fresh": [[round(x, 5) for x in r] for r in self.fresh]}}

    def host_text(self) -> str:
        """The per-round host figures, side by side, as medians: run-queue wait, the run's other threads, steal."""
        parts = []
        for key, what in (("wait_ms", "waited for the CPU"), ("others_ms", "other threads used"),
                          ("steal_ms", "the hypervisor stole")):
            medians = {side: _median_of(rounds, key) for side, rounds in self.host.items()}
            if all(v is not None for v in medians.values()):
                parts.append(f"{what} {medians['in-run']:.3g} ms (in-run) / {medians['fresh']:.3g} ms (fresh)")
        return "; per round, the median thread " + ", ".join(parts) if parts else ""


def _median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def alternate(own: Callable[[], list[float]], fresh: Callable[[], dict[str, Any]], pairs: int,
              index: HostIndex | None = None) -> Paired:
    """`pairs` pairs of rounds: the fresh child's first in even pairs, the run's own first in odd ones (so a host
    that drifts within a pair favours neither). `fresh` returns the child's answer: its samples, its index before
    and after (`index`) and what the host did (`host`, optional)."""
    out = Paired(index=index or HostIndex())
    for i in range(pairs):
        for side in (("fresh", "in-run") if i % 2 == 0 else ("in-run", "fresh")):
            if side == "fresh":
                with console.timed(f"fresh eager, pair {i + 1}"):  # the console keeps quiet while the child times
                    answer = fresh()
                out.index.add("fresh", *answer["index"])
                out.fresh.append(answer["samples"])
                out.host["fresh"].append(answer.get("host") or {})
            else:
                with console.timed(f"in-run eager, pair {i + 1}"):
                    start = procstat.snapshot()  # outside the index's samples and the round's timing
                    out.in_run.append(out.index.turn("in-run", own, share=False))
                    out.host["in-run"].append(procstat.between(start, procstat.snapshot()))
    return out


def record_paired(ctx: Context[Options], paired: Paired) -> bool:
    """`in_run_over_fresh` with its interval, the index and rounds notes, and the verdict on the instrument."""
    ratio, ci = intervals.pair_ratio(paired.in_run, paired.fresh)
    ends = (None, None) if ci is None else (ci.low, ci.high)
    for spec, value in zip((M.IN_RUN_OVER_FRESH, M.IN_RUN_OVER_FRESH_CI_LOW, M.IN_RUN_OVER_FRESH_CI_HIGH),
                           (ratio, *ends)):
        ctx.metric(spec, None if value is None else round(value, 4), **PAIRED)
    ctx.note(N.HOST_INDEX.key_for(shape="paired"), paired.index.note())
    ctx.note(N.PAIRED_ROUNDS.key, paired.note())
    in_run_index, fresh_index = paired.index.per_round("in-run"), paired.index.per_round("fresh")
    moved = hostspeed.spread_ratio(in_run_index + fresh_index)
    clean = hostspeed.in_run_clean(ratio, ci)
    inside = "" if ci is None else f" {ci.text()}"
    host = "" if moved is None else f"; the host index moved {moved:.2f}x (p95/p5) over the pairs"
    if in_run_index and fresh_index:
        host += (f", in-run over fresh {statistics.median(in_run_index) / statistics.median(fresh_index):.2f}x "
                 "(the loop's own paired ratio)")
    cpu = paired.pinned.get("in-run")
    where = (f"; both sides pinned to CPU {cpu}" if cpu is not None and paired.pinned.get("fresh") == cpu else
             "; not pinned to one CPU")
    detail = (f"{len(paired.in_run)} paired rounds: in-run {statistics.median(x for r in paired.in_run for x in r):.4g}"
              f" ms, fresh {statistics.median(x for r in paired.fresh for x in r):.4g} ms, ratio {ratio:.3f}x per pair"
              f"{inside}"
              f"{host}{where}{paired.host_text()}")
    return ctx.check("in-run eager within 5% of an interleaved fresh process (or its interval holds 1)", clean,
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
    """Start the child, record its take (`when=end`), then alternate eager rounds with it; None if it failed."""
    ctx.progress("sentinel (end): a fresh process, then eager rounds alternating with the run's own")
    kwargs = sentinel.child_kwargs(ctx) | {"pair_steps": min(ctx.options.pair_steps, sentinel.steps_of(ctx))}
    with turns.Turns(sentinel.CHILD, kwargs, timeout_s=ctx.options.timeout_s) as child:
        try:
            ready = child.wait()["ready"]
            sentinel.record_take(ctx, ready, "end")
            own = _own_eager(ctx)
            own()  # the run's own build warmed (its process is warm already)
            profiler_guard.check_clean("the paired rounds of sentinel_end")
            with cpuplace.pinned(cpuplace.thread_cpu()) as cpu:  # both sides on one CPU: the same core's speed
                pinned = {"in-run": cpu, "fresh": None if cpu is None else child.ask({"pin": cpu})["pinned"]}
                paired = alternate(own, lambda: ask_round(child), ctx.options.pairs)
            paired.pinned = pinned
        except turns.ChildGone as exc:
            res = child.finish()
            ctx.check("the sentinel child measured the step (end)", False, detail=f"{exc}: {res.describe()}",
                      fatal=True)
            return None
        child.finish()
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
