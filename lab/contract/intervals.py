"""Intervals and the one rule by which the lab calls two figures the same, higher or lower.

What the interval is. A timing is a set of rounds, the methods in rotating order, each round a run of
consecutive steps. Steps within a round are not independent (a slow stretch of the host slows a run
of them together) and drift between rounds is what moves a median most, so the interval is a
percentile bootstrap over rounds: each resample draws `len(rounds)` rounds with replacement, each
drawn round bringing all of its steps (one block), and takes the median of the pooled steps. A
speedup is the ratio of two such medians; its resamples draw the *same* round indices for both
methods (`paired`), since round r of eager and round r of a method ran side by side in time and share
its drift. With R rounds there are only C(2R-1, R) distinct resamples (10 for 3 rounds, 126 for 5):
few rounds give a wide, coarse interval, which is the honest answer. Fewer than two rounds give no
interval (None): nothing says how much the median would move.

Why the bootstrap and not a normal approximation: step times are skewed (a few slow steps), the
statistic is a median (and a ratio of medians), and the rounds are few; the percentile bootstrap
needs no distributional assumption and costs milliseconds here. Why not a Mann-Whitney test per
pair (as asv): the lab stores one interval per figure, so every page and every later comparison
judges from what the record holds, without the raw samples of both sides at hand.

The rule (`relation`): two figures are "the same" when their 95% intervals overlap, higher or lower
when they are disjoint; where either interval is missing the relation is UNKNOWN and the caller says
so. Overlap is conservative (two intervals can overlap while the difference is real); a lab that
says "faster" only when it is shown is the point. `versus` judges one interval against a fixed
value (a speedup against 1), `within` whether an interval lies inside a band ("about 1x").

Standard library only: the report and `lab compare` use it without torch.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from enum import StrEnum
from typing import Callable, Sequence

CONFIDENCE = 0.95
RESAMPLES = 1000
SEED = 20261201  # fixed: the same samples always give the same interval


class Relation(StrEnum):
    SAME = "same"  # the intervals overlap: this run cannot tell them apart
    HIGHER = "higher"  # B's interval lies wholly above A's
    LOWER = "lower"  # B's interval lies wholly below A's
    UNKNOWN = "unknown"  # an interval is missing


@dataclass(frozen=True)
class Interval:
    """A 95% interval [low, high]."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ValueError(f"an interval's low end {self.low} is above its high end {self.high}")

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def text(self, digits: int = 3) -> str:
        return f"[{self.low:.{digits}g}, {self.high:.{digits}g}]"


def of(low: float | None, high: float | None) -> Interval | None:
    """An Interval from two stored ends, or None where either is missing."""
    return None if low is None or high is None else Interval(float(low), float(high))


def relation(a: Interval | None, b: Interval | None) -> Relation:
    """Where B stands against A: the same when the intervals overlap, else higher or lower."""
    if a is None or b is None:
        return Relation.UNKNOWN
    if a.overlaps(b):
        return Relation.SAME
    return Relation.HIGHER if b.low > a.high else Relation.LOWER


def versus(b: Interval | None, value: float) -> Relation:
    """Where an interval stands against a fixed value (a speedup against 1: faster, the same, slower)."""
    return relation(Interval(value, value), b)


def within(b: Interval | None, band: tuple[float, float]) -> bool | None:
    """Whether the interval lies wholly inside the band (None: no interval)."""
    return None if b is None else band[0] <= b.low and b.high <= band[1]


def percentile_interval(stats: list[float]) -> Interval:
    """The central 95% of bootstrap statistics: their CONFIDENCE interval (by rank)."""
    xs = sorted(stats)
    tail = (1 - CONFIDENCE) / 2
    return Interval(xs[int(tail * (len(xs) - 1))], xs[round((1 - tail) * (len(xs) - 1))])


def _usable(rounds: Sequence[Sequence[float]]) -> list[list[float]]:
    return [[float(x) for x in r] for r in rounds if len(r)]


def median_interval(rounds: Sequence[Sequence[float]], resamples: int = RESAMPLES,
                    seed: int = SEED) -> Interval | None:
    """The 95% interval of the median of the pooled samples, bootstrapping rounds as blocks (None: < 2 rounds)."""
    rs = _usable(rounds)
    if len(rs) < 2:
        return None
    rng = random.Random(seed)
    n = len(rs)
    return percentile_interval([statistics.median([x for i in rng.choices(range(n), k=n) for x in rs[i]])
                         for _ in range(resamples)])


def pair_ratio(numerator: Sequence[Sequence[float]], denominator: Sequence[Sequence[float]],
               resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, Interval | None]:
    """The median over pairs of (pair i's numerator round median / its denominator round median), with its 95%
    interval, a bootstrap over pairs; for two processes that took turns round by round (lab.experiments.sentinel_end).
    Why per pair and not the two sides' pooled medians: a host whose speed flips within seconds slows a few rounds
    of one side and not the other, and the pooled medians follow how many slow rounds each side drew; each pair's
    ratio compares two rounds a moment apart. Three fresh processes pinned to one H200 CPU, 12 rounds of 64 steps
    each: pooled 1.113 [1.009, 1.352] for two of them, per pair 1.036; 30 rounds of 32 steps: both within 1.5%."""
    pairs = [statistics.median(a) / statistics.median(b) for a, b in zip(numerator, denominator, strict=True)
             if a and b and statistics.median(b) > 0]
    if not pairs:
        raise ValueError("pair_ratio: no pair has samples on both sides")
    if len(pairs) < 2:
        return pairs[0], None
    rng = random.Random(seed)
    stats = [statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(resamples)]
    return statistics.median(pairs), percentile_interval(stats)


def ratio_interval(numerator: Sequence[Sequence[float]], denominator: Sequence[Sequence[float]],
                   resamples: int = RESAMPLES, seed: int = SEED, paired: bool | None = None) -> Interval | None:
    """The 95% interval of median(numerator) / median(denominator): a speedup is eager's rounds over a method's.

    Paired: where both sides have the same number of rounds (rounds run side by side in rotating order),
    each resample draws the same round indices for both; otherwise each side is drawn on its own.
    `paired=False` draws each side on its own whatever the counts: for two sides timed one after the
    other (round r of one did not run beside round r of the other, so they share no drift)."""
    return _two_sided(numerator, denominator, lambda top, bottom: top / bottom if bottom > 0 else None, resamples,
                      seed, paired)


def difference_interval(minuend: Sequence[Sequence[float]], subtrahend: Sequence[Sequence[float]],
                        resamples: int = RESAMPLES, seed: int = SEED, paired: bool | None = None) -> Interval | None:
    """The 95% interval of median(minuend) - median(subtrahend), drawn as `ratio_interval` draws (paired where both
    sides ran in the same rotating rounds): what a stage costs, a variant that leaves it out against the whole."""
    return _two_sided(minuend, subtrahend, lambda a, b: a - b, resamples, seed, paired)


def _two_sided(left: Sequence[Sequence[float]], right: Sequence[Sequence[float]],
               combine: Callable[[float, float], float | None], resamples: int, seed: int,
               paired: bool | None) -> Interval | None:
    num, den = _usable(left), _usable(right)
    if len(num) < 2 or len(den) < 2:
        return None
    rng = random.Random(seed)
    paired = len(num) == len(den) and paired is not False
    stats = []
    for _ in range(resamples):
        pick_n = rng.choices(range(len(num)), k=len(num))
        pick_d = pick_n if paired else rng.choices(range(len(den)), k=len(den))
        value = combine(statistics.median([x for i in pick_n for x in num[i]]),
                        statistics.median([x for i in pick_d for x in den[i]]))
        if value is not None:
            stats.append(value)
    return percentile_interval(stats) if stats else None


def clustered_ratio_interval(numerator: Sequence[Sequence[Sequence[float]]],
                             denominator: Sequence[Sequence[Sequence[float]]], resamples: int = RESAMPLES,
                             seed: int = SEED) -> Interval | None:
    """The 95% interval of median(numerator) / median(denominator), each side's samples pooled over clusters of paired
    rounds: clusters[c][r] is round r of cluster c (a process, say, that timed both sides in rotating rounds).

    A two-level bootstrap: each resample draws the clusters with replacement, then within each drawn cluster its
    rounds with replacement, the same indices for both sides (paired as `ratio_interval` pairs). So a ratio that
    moves from one cluster to the next (one process to the next, or one machine to the next) widens the
    interval as it should, where rounds pooled as one cluster would draw on one process's luck. None with fewer than
    two clusters, or a cluster whose two sides have different numbers of rounds (ValueError)."""
    num = [_usable(c) for c in numerator]
    den = [_usable(c) for c in denominator]
    if len(num) != len(den):
        raise ValueError(f"clustered_ratio_interval: {len(num)} clusters against {len(den)}")
    if any(len(a) != len(b) for a, b in zip(num, den)):
        raise ValueError("clustered_ratio_interval: a cluster's two sides have different numbers of rounds")
    pairs = [(a, b) for a, b in zip(num, den) if a]
    if len(pairs) < 2:
        return None
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        top: list[float] = []
        bottom: list[float] = []
        for c in rng.choices(range(len(pairs)), k=len(pairs)):
            a, b = pairs[c]
            for r in rng.choices(range(len(a)), k=len(a)):
                top += a[r]
                bottom += b[r]
        low = statistics.median(bottom)
        if low > 0:
            stats.append(statistics.median(top) / low)
    return percentile_interval(stats) if stats else None
