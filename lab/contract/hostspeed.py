"""What the host's CPU speed did to a timing: the statistics of the host-speed index (lab.measure.hostspeed).

Every method that does host work is timed with the index beside it: per round, the fixed loop's time
just before and just after the method's turn (their mean is the round's index, in ms; higher is a
slower host). From a method's round medians and their indices:

- `sensitivity`: the elasticity of the step time on the index, the slope of log(step) on log(index)
  by least squares over the rounds. 1: the step takes as much longer as the loop does (all host
  work on the same core); 0: the step does not care what the host's CPU does (graph replay: the
  device's time). Its 95% interval is a pairs bootstrap over rounds (each resample draws rounds with
  their index). Why an elasticity and not the ratio of the medians in the slowest and fastest quarter
  of host speed: the lab's timings have 3-10 rounds a method, too few for quarters; a slope uses
  every round. Why least squares and not Theil-Sen: with so few rounds the two agree, and the
  bootstrap is O(rounds) a resample. On the H200 rounds of 2026-12-02 (371 rounds, the loop moving
  about 2x) eager's elasticity is 0.90 [0.84, 0.96] and graph replay's 0.0003 [0.00005, 0.0007].
- `reference_index`: the reference host speed, the 10th percentile of the index samples of the
  timing (every method's rounds): the host near its fastest, at a speed it actually ran at for a
  tenth of the timing rather than its single quickest instant. Every method of the timing is put at
  the same reference, so their ratio is a speedup at one host speed.
- `at_reference`: the method's step at the reference speed from the same fit, its slope held to [0, 1]
  (a step is host work, elasticity 1, plus work that does not care, 0: a slope outside is the noise of
  few rounds, `Fit.bounded`), with its interval from the same resamples; `speedup_at_reference` the baseline's over the method's, rounds paired
  (round r of both ran side by side, as `lab.contract.intervals.ratio_interval` pairs them).
- `follows`: whether a method followed the host (its elasticity's interval wholly above `FOLLOWS`),
  did not (wholly below), or cannot be told (None).

A calibration loop explains only the part of the variance that comes from the CPU's speed: on the
H200 rounds the correlation of eager with the loop was 0.79. So the lab measures the relation per
run and per method (the elasticity and its interval) and never assumes it.

Standard library only (the report reads these figures without torch).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from lab.contract import intervals
from lab.contract.intervals import Interval

REFERENCE_PERCENTILE = 10  # the reference host speed: this percentile of the timing's index samples
FOLLOWS = 0.5  # an elasticity above this (its whole interval): more than half of the host's moves pass into the step
MIN_ROUNDS = 3  # a slope through fewer rounds says nothing


@dataclass(frozen=True)
class Estimate:
    """A figure and its 95% interval (None: too few resamples could be fitted)."""

    value: float
    interval: Interval | None


@dataclass(frozen=True)
class Fit:
    """log(step) = intercept + slope * log(index), by least squares through the rounds' centroid (mean log index,
    mean log step)."""

    slope: float
    intercept: float
    centroid: tuple[float, float] = (0.0, 0.0)

    def at(self, index: float) -> float:
        return math.exp(self.intercept + self.slope * math.log(index))

    def bounded(self) -> Fit:
        """The same fit with its slope held to [0, 1], through the same centroid: what `at_reference` predicts with.
        A step is host work (which takes as much longer as the index does: elasticity 1) plus work that does not
        care (0), so a slope outside [0, 1] is the noise of few rounds, and extrapolating with it would put the
        step anywhere (3 rounds of a compiled CPU step gave a slope of 9)."""
        slope = min(1.0, max(0.0, self.slope))
        mx, my = self.centroid
        return Fit(slope, my - slope * mx, self.centroid)


def _pairs(index: Sequence[float], times: Sequence[float]) -> list[tuple[float, float]]:
    return [(math.log(x), math.log(y)) for x, y in zip(index, times, strict=True) if x > 0 and y > 0]


def _fit(points: Sequence[tuple[float, float]]) -> Fit | None:
    if len(points) < 2:
        return None
    mx = statistics.fmean(p[0] for p in points)
    my = statistics.fmean(p[1] for p in points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx <= 0:
        return None
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return Fit(slope, my - slope * mx, (mx, my))


def fit(index: Sequence[float], times: Sequence[float]) -> Fit | None:
    """The log-log fit of a method's round medians on their rounds' index (None: fewer than MIN_ROUNDS rounds, or
    an index that did not move at all)."""
    points = _pairs(index, times)
    return _fit(points) if len(points) >= MIN_ROUNDS else None


def _picks(n: int, resamples: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [rng.choices(range(n), k=n) for _ in range(resamples)]


def _percentiles(stats: list[float]) -> Interval | None:
    if len(stats) < intervals.RESAMPLES // 2:  # most resamples could not be fitted: no honest interval
        return None
    return intervals.percentile_interval(stats)


def _bootstrapped(index: Sequence[float], times: Sequence[float], resamples: int, seed: int,
                  of: Callable[[Fit], float]) -> Estimate | None:
    """`of` the rounds' fit, with its pairs-bootstrap 95% interval (`of` each resample's fit); None: no fit."""
    points = _pairs(index, times)
    whole = fit(index, times)
    if whole is None:
        return None
    fits = (_fit([points[i] for i in pick]) for pick in _picks(len(points), resamples, seed))
    return Estimate(of(whole), _percentiles([of(f) for f in fits if f is not None]))


def sensitivity(index: Sequence[float], times: Sequence[float], resamples: int = intervals.RESAMPLES,
                seed: int = intervals.SEED) -> Estimate | None:
    """The elasticity of the step time on the host index, with its pairs-bootstrap 95% interval."""
    return _bootstrapped(index, times, resamples, seed, lambda f: f.slope)


def reference_index(samples: Sequence[float]) -> float | None:
    """The reference host speed: the REFERENCE_PERCENTILE-th percentile (nearest rank) of the index samples."""
    xs = sorted(float(x) for x in samples if x > 0)
    return xs[max(0, math.ceil(REFERENCE_PERCENTILE / 100 * len(xs)) - 1)] if xs else None


def at_reference(index: Sequence[float], times: Sequence[float], reference: float,
                 resamples: int = intervals.RESAMPLES, seed: int = intervals.SEED) -> Estimate | None:
    """The step time the fit (its slope held to [0, 1]: `Fit.bounded`) puts at the reference index, with its
    pairs-bootstrap 95% interval."""
    return _bootstrapped(index, times, resamples, seed, lambda f: f.bounded().at(reference))


def speedup_at_reference(base: tuple[Sequence[float], Sequence[float]], method: tuple[Sequence[float], Sequence[float]],
                         reference: float, resamples: int = intervals.RESAMPLES,
                         seed: int = intervals.SEED) -> Estimate | None:
    """The baseline's step at the reference over the method's (each (index, times) per round), rounds paired: each
    resample draws the same round indices for both (they ran side by side in rotating rounds)."""
    bp, mp = _pairs(*base), _pairs(*method)
    fb, fm = fit(*base), fit(*method)
    if fb is None or fm is None or len(bp) != len(mp):
        return None
    fits = ((_fit([bp[i] for i in pick]), _fit([mp[i] for i in pick])) for pick in _picks(len(bp), resamples, seed))
    values = [b.bounded().at(reference) / m.bounded().at(reference) for b, m in fits if b is not None and m is not None]
    return Estimate(fb.bounded().at(reference) / fm.bounded().at(reference), _percentiles(values))


def follows(interval: Interval | None) -> bool | None:
    """Whether a method's step followed the host's speed: True (the elasticity's interval wholly above FOLLOWS),
    False (wholly below), None (no interval, or it straddles FOLLOWS)."""
    if interval is None:
        return None
    if interval.low > FOLLOWS:
        return True
    if interval.high < FOLLOWS:
        return False
    return None


def spread_ratio(samples: Sequence[float]) -> float | None:
    """How far the host's speed moved over a run: the index's 95th percentile over its 5th (nearest rank)."""
    xs = sorted(float(x) for x in samples if x > 0)
    if len(xs) < 2:
        return None
    return xs[max(0, math.ceil(0.95 * len(xs)) - 1)] / xs[max(0, math.ceil(0.05 * len(xs)) - 1)]


def in_run_clean(ratio: float, interval: Interval | None, tolerance: float = 0.05) -> bool:
    """The paired in-run over fresh-process verdict: clean when the ratio is within `tolerance` of 1 or its interval
    holds 1."""
    return abs(ratio - 1) <= tolerance or (interval is not None and interval.contains(1.0))
