"""The run's own eager and fresh processes taking turns round by round: the rounds, and the paired ratio's figures.

lab.experiments.sentinel starts the fresh processes and drives the turns (at the run's start and its end);
lab.experiments.sentinel_end gives the verdict. Here: `alternate` (the cycles, the order rotated every cycle,
each round between two samples of the host-speed index and with what the host did, lab.host.procstat), `Paired`
(the rounds per side, the control, the per-cycle ratios), `own_eager` (the run's own step, on the fresh
processes' prompt) and `record` (`in_run_over_fresh` and `fresh_over_fresh` with their intervals, and the notes).

Why two fresh processes: two processes that did nothing differ by themselves. Pinned to one H200 CPU, 30 cycles of
32 steps: three fresh processes within 1.5% of each other in one trial, 4.7% (0.953 [0.916, 0.971]) and 4.4% apart
in another; a process that had run one CPU-only profiler session was 18-30% slower, one that had run a CPU+CUDA
session (CUPTI torn down) was not. So the control is the two fresh processes' geometric mean per cycle (a
process's own luck weighs half), and their own ratio, `fresh_over_fresh` with its interval, is the instrument's
resolution. The ratio is taken per cycle (lab.contract.intervals.pair_ratio), as the host's speed flips within
seconds: 12 rounds of 64 steps had put two fresh processes 11% apart by their pooled medians, 3.6% per pair.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from lab import console
from lab.contract import hostspeed
from lab.contract import intervals
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.hostspeed import Estimate
from lab.contract.names import Method, Param as P
from lab.experiments.common.hostspeed import put
from lab.host import procstat
from lab.measure.hostspeed import HostIndex
from lab.run import turns

PARAMS: dict[str, Any] = {P.METHOD: Method.EAGER, P.BATCH: 1, P.DTYPE: "float32"}
IN_RUN, FRESH, SECOND = "in-run", "fresh", "fresh-2"  # the sides: the run's own process, the fresh children


@dataclass
class Paired:
    """Each side's rounds in cycle order, the host index around each, what the host did in each (lab.host.procstat)
    and the CPU each side was pinned to (None: not pinned)."""

    rounds: dict[str, list[list[float]]] = field(default_factory=dict)
    index: HostIndex = field(default_factory=HostIndex)
    host: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pinned: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def from_note(cls, note: dict[str, Any]) -> Paired:
        """The rounds a `paired_rounds` note kept (its samples and pinning; not the index)."""
        return cls(rounds={side: [list(r) for r in rs] for side, rs in note["samples_ms"].items()},
                   pinned=dict(note.get("pinned") or {}))

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

    def cycle_ratios(self, twin: bool = False) -> list[float]:
        """Each cycle's ratio of the run's round median over the control's (`twin`: the first fresh child's over the
        second's; none with one child)."""
        if twin and SECOND not in self.rounds:
            return []
        num, den = (self.rounds[FRESH], self.rounds[SECOND]) if twin else (self.in_run, self.fresh)
        return [statistics.median(a) / statistics.median(b) for a, b in zip(num, den, strict=True)
                if a and b and statistics.median(b) > 0]

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


def ask_round(child: turns.Turns) -> dict[str, Any]:
    """One eager round of the paired child (lab.experiments.sentinel.serve's answer)."""
    return child.ask({"round": True})


def own_eager(ctx: Any, steps: int) -> Callable[[], list[float]]:
    """The run's own eager step at batch 1 in fp32, on the child's prompt (same seed), one round of `steps` a call."""
    import torch

    from lab.step import methods as stepmethods

    prof = ctx.profile
    _, w = ctx.gpt2("float32")
    g = torch.Generator().manual_seed(1001)
    prompt = torch.randint(0, prof.model.vocab_size, (1, prof.prompt_len), generator=g).to(ctx.device)
    m = stepmethods.build(Method.EAGER, w, prompt, prof.max_len, warmup=3)
    return lambda: m.decode(steps, ctx.clock, readback=False)


def record(ctx: Any, paired: Paired) -> str:
    """`in_run_over_fresh` and `fresh_over_fresh` with intervals, the index and rounds notes; returns what they say
    (the cycles, the medians, the ratio, the resolution, the host, the pinning) for a check's detail."""
    ratio, ci = paired.ratio()
    put(ctx, M.IN_RUN_OVER_FRESH, Estimate(ratio, ci), 4, **PARAMS)
    ctx.note(N.HOST_INDEX.key_for(shape="paired"), paired.index.note())
    ctx.note(N.PAIRED_ROUNDS.key, paired.note())
    own_index, fresh_index = paired.index.per_round(IN_RUN), paired.index.per_round(FRESH)
    moved = hostspeed.spread_ratio([x for side in paired.rounds for x in paired.index.per_round(side)])
    inside = "" if ci is None else f" {ci.text()}"
    host = "" if moved is None else f"; the host index moved {moved:.2f}x (p95/p5) over the cycles"
    if own_index and fresh_index:
        loop = statistics.median(a / b for a, b in zip(own_index, fresh_index))
        host += f", the index's own in-run over fresh {loop:.2f}x per cycle"
    twin = paired.resolution()
    if twin is not None:
        put(ctx, M.FRESH_OVER_FRESH, Estimate(*twin), 4, **PARAMS)
        inside += (f"; two fresh processes differed {twin[0]:.3f}x" + ("" if twin[1] is None else f" {twin[1].text()}")
                   + " (the instrument's resolution)")
    cpus = set(paired.pinned.values())
    where = f"; every side pinned to CPU {cpus.pop()}" if len(cpus) == 1 and None not in cpus else "; not pinned"
    return (f"{len(paired.in_run)} cycles: in-run {statistics.median(x for r in paired.in_run for x in r):.4g} ms, "
            f"fresh {statistics.median(x for r in paired.fresh for x in r):.4g} ms, ratio {ratio:.3f}x per cycle"
            f"{inside}{host}{where}{paired.host_text()}")
