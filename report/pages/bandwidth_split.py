"""What memory speed bought, between two runs: each step both ran, split into the part that follows memory speed and
the part that does not.

Each run records the device copy bandwidth it measured (`bandwidth_GBps`, kind copy) and, per step, its time
(`step_ms`) and the bytes it must read (`bytes_per_step`). At a run's copy rate those bytes take x = bytes /
bandwidth, "the floor". Where two runs measured different copy rates, the same step gives two points (x, T); the
line through them is T = a + c * x:

- c, "exposed": the share of the bytes' time that shows in the step (1: every byte's time shows; 0: the step does
  not follow memory speed);
- a, the intercept: the step the line gives at no byte time, "at unlimited bandwidth".

With s the run of the slower memory and f the faster (by copy rate, whichever side each is), Δ = x_s - x_f:
c = (T_s - T_f) / Δ and a = (T_f * x_s - T_s * x_f) / Δ; at f's floor the line gives T_f exactly. Their intervals
take the two steps' 95% intervals as a box: a rises with T_f and falls with T_s, c the reverse.

The assumption: the two runs differ in memory speed and in nothing else that sets the step (the same kernels, SM
clocks and L2: an H100 SXM and an H200 are such a pair). A step bound by its host's dispatch (eager's) follows the
host, which differs too: its row says so (`caveat`), whatever c is; and where c leaves [0, 1] something besides
memory speed differs, and the line says nothing about memory. Where each kernel's time grows with its
bytes' time as a convex function (say the larger of a fixed latency and its bytes' time), so does the step, and a
line through two points of a convex curve lies below it outside them: the intercept is at most the step at unlimited
bandwidth, a lower bound for these kernels, not for the hardware (other kernels could do better).

Below MIN_BANDWIDTH_RATIO Δ is small against the steps' noise and the line is noise: no split, and the one line
saying why. Pure: reads two Results, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract.names import Param as P
from lab.contract.results import Metric, Record, Results
from report.pages.why_moved import figure_class

__all__ = ["MIN_BANDWIDTH_RATIO", "COPY", "BandwidthSplit", "Rates", "SplitRow", "bandwidth_split", "copy_rate",
           "split_step"]

# The two copy rates must differ by at least this factor: below it Δ = x_s - x_f is small against the steps'
# noise, and the line through the two points is noise.
MIN_BANDWIDTH_RATIO = 1.15
COPY = "copy"  # the kind of bandwidth_GBps that is the device's copy rate (lab.experiments.ceilings)

Side = Literal["A", "B"]


@dataclass(frozen=True)
class Rates:
    """One experiment's copy rates in the two runs, and why there is no split where there is none."""

    experiment: str
    a_GBps: float
    b_GBps: float

    @property
    def ratio(self) -> float:
        """The faster copy rate over the slower (at least 1)."""
        return max(self.a_GBps, self.b_GBps) / min(self.a_GBps, self.b_GBps)

    @property
    def absent(self) -> str:
        """Why no step of it is split: '' where the rates differ by at least MIN_BANDWIDTH_RATIO."""
        if self.ratio >= MIN_BANDWIDTH_RATIO:
            return ""
        return (f"the runs' copy rates differ by {(self.ratio - 1) * 100:.1f}% ({self.a_GBps:,.0f} vs "
                f"{self.b_GBps:,.0f} GB/s): under {(MIN_BANDWIDTH_RATIO - 1) * 100:.0f}%, no split")

    @property
    def slower(self) -> Side:
        return "A" if self.a_GBps < self.b_GBps else "B"


@dataclass(frozen=True)
class SplitRow:
    """One step both runs ran, split by the line through its two points (s: the slower memory, f: the faster)."""

    experiment: str
    params: dict[str, Any]
    slower: Side  # which run had the slower memory
    bytes: float  # bytes the step must read (the same in both runs)
    slow_GBps: float
    fast_GBps: float
    floor_slow_us: float  # x_s: the bytes' time at the slower copy rate
    floor_fast_us: float  # x_f
    step_slow_ms: float  # T_s
    step_fast_ms: float  # T_f
    exposed: float  # c: the share of the bytes' time that shows in the step
    exposed_low: float | None  # c's interval from the steps' 95% intervals (None: a step has none)
    exposed_high: float | None
    intercept_us: float  # a: the step the line gives at no byte time
    intercept_low_us: float | None
    intercept_high_us: float | None
    dispatch: bool = False  # bound by the host's dispatch (eager's step: report.pages.why_moved.figure_class)

    @property
    def step_a_ms(self) -> float:
        return self.step_slow_ms if self.slower == "A" else self.step_fast_ms

    @property
    def step_b_ms(self) -> float:
        return self.step_fast_ms if self.slower == "A" else self.step_slow_ms

    @property
    def consistent(self) -> bool:
        """Whether c (its interval where it has one) reaches [0, 1]: outside it the step moved by more than its bytes'
        time (or against it), so something besides memory speed differs and the line says nothing about memory."""
        low = self.exposed if self.exposed_low is None else self.exposed_low
        high = self.exposed if self.exposed_high is None else self.exposed_high
        return low <= 1 and high >= 0

    @property
    def caveat(self) -> str:
        """Why the line says nothing about memory for this step ('' where it may): a step bound by its host's
        dispatch (the two runs' hosts differ too), or c outside [0, 1]."""
        if self.dispatch:
            return "bound by the host's dispatch: the hosts differ too, the line says nothing about memory"
        return "" if self.consistent else "c outside [0, 1]: more than memory speed differs"

    def line_ms(self, floor_us: float) -> float:
        """The step the line gives where the bytes take `floor_us` (at floor_fast_us: step_fast_ms)."""
        return (self.intercept_us + self.exposed * floor_us) / 1000


@dataclass(frozen=True)
class BandwidthSplit:
    """The experiments with a copy rate in both runs (sorted), and the steps split (by experiment, then params)."""

    rates: tuple[Rates, ...] = ()
    rows: tuple[SplitRow, ...] = ()

    def __bool__(self) -> bool:  # a section to show: some experiment has a copy rate in both runs
        return bool(self.rates)


def _number(value: Any) -> float | None:
    """A finite number above zero, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _single(values: list[float | None]) -> float | None:
    """The one value all of `values` agree on; None where there is none, one is not a number, or they disagree."""
    if not values or None in values or len(set(values)) != 1:
        return None
    return values[0]


def copy_rate(rec: Record) -> float | None:
    """The device copy bandwidth a record holds (GB/s); None where it holds none, or several that disagree."""
    return _single([_number(m.value) for m in q.all(rec, M.BANDWIDTH_GBPS, **{P.KIND: COPY})
                    if m.unit == M.BANDWIDTH_GBPS.unit])


def _bytes_of(rec: Record, step: Metric) -> float | None:
    """The bytes_per_step whose params are a subset of the step's; None where none is, or several disagree."""
    return _single([_number(m.value) for m in q.all(rec, M.BYTES_PER_STEP)
                    if m.unit == M.BYTES_PER_STEP.unit and m.params.items() <= step.params.items()])


def _ci(step: Metric) -> tuple[float, float] | None:
    sp = step.spread
    if sp is None or sp.ci_low is None or sp.ci_high is None:
        return None
    return float(sp.ci_low), float(sp.ci_high)


def split_step(experiment: str, params: dict[str, Any], nbytes: float, slower: Side,
               slow: tuple[float, Metric], fast: tuple[float, Metric]) -> SplitRow:
    """The line through (x_s, T_s) and (x_f, T_f); `slow` and `fast` are (copy rate GB/s, step_ms metric)."""
    (bw_s, step_s), (bw_f, step_f) = slow, fast
    x_s, x_f = nbytes / bw_s * 1e-6, nbytes / bw_f * 1e-6  # ms: bytes / (GB/s * 1e9) s
    t_s, t_f = float(step_s.value), float(step_f.value)
    delta = x_s - x_f
    ci_s, ci_f = _ci(step_s), _ci(step_f)
    c_ends: tuple[float | None, float | None] = (None, None)
    a_ends: tuple[float | None, float | None] = (None, None)
    if ci_s is not None and ci_f is not None:
        (s_lo, s_hi), (f_lo, f_hi) = ci_s, ci_f
        c_ends = (s_lo - f_hi) / delta, (s_hi - f_lo) / delta
        a_ends = (f_lo * x_s - s_hi * x_f) / delta * 1000, (f_hi * x_s - s_lo * x_f) / delta * 1000
    return SplitRow(experiment, dict(params), slower, nbytes, bw_s, bw_f, x_s * 1000, x_f * 1000, t_s, t_f,
                    (t_s - t_f) / delta, c_ends[0], c_ends[1], (t_f * x_s - t_s * x_f) / delta * 1000,
                    a_ends[0], a_ends[1], figure_class(M.STEP_MS.name, params) == "dispatch")


def _steps(rec: Record) -> dict[tuple[str, str], Metric]:
    return {m.key: m for m in rec.metrics if m.name == M.STEP_MS.name and m.unit == M.STEP_MS.unit
            and _number(m.value) is not None}


def _split_record(rates: Rates, ra: Record, rb: Record) -> list[SplitRow]:
    """Every step both records hold with the same params, whose bytes are known and the same in both."""
    steps_a, steps_b = _steps(ra), _steps(rb)
    out = []
    for key, step_a in steps_a.items():
        step_b = steps_b.get(key)
        if step_b is None:
            continue
        nbytes = _bytes_of(ra, step_a)
        if nbytes is None or nbytes != _bytes_of(rb, step_b):
            continue
        a, b = (rates.a_GBps, step_a), (rates.b_GBps, step_b)
        slow, fast = (a, b) if rates.slower == "A" else (b, a)
        out.append(split_step(rates.experiment, step_a.params, nbytes, rates.slower, slow, fast))
    return out


def _order(params: dict[str, Any]) -> tuple[tuple[str, int, Any], ...]:
    """Params in a stable order, numbers numerically (batch 8 before batch 64)."""
    return tuple((k, 0, v) if M.is_number(v) else (k, 1, str(v)) for k, v in sorted(params.items()))


def bandwidth_split(a: Results, b: Results) -> BandwidthSplit:
    """For each experiment both runs hold with a copy rate in each: its rates, and, where they differ by at least
    MIN_BANDWIDTH_RATIO, every step both ran split into what follows memory speed and what does not."""
    recs_b = {r.id: r for r in b.experiments}
    rates: list[Rates] = []
    rows: list[SplitRow] = []
    for ra in sorted(a.experiments, key=lambda r: r.id):
        rb = recs_b.get(ra.id)
        bw_a, bw_b = copy_rate(ra), (copy_rate(rb) if rb is not None else None)
        if rb is None or bw_a is None or bw_b is None:
            continue
        r = Rates(ra.id, bw_a, bw_b)
        rates.append(r)
        if not r.absent:
            rows += sorted(_split_record(r, ra, rb), key=lambda row: _order(row.params))
    return BandwidthSplit(tuple(rates), tuple(rows))
