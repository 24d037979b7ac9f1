"""Measurements that keep their raw samples.

- `Clock`: host time (perf_counter) on the CPU; CUDA events on the GPU (the device's own time
  between two points of a stream, read after one synchronisation).
- `time_calls`: warm up, synchronise, time each call, return the samples.
- `rotating_rounds`: several rounds with the methods in rotating order, so drift and thermal state
  hit every method alike.
- `spread`: median, quartiles and a noise flag derived from the samples (as torch.utils.benchmark).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

from lab.results import Spread

NOISY_REL_IQR = 0.10  # an IQR above 10% of the median flags the measurement as noisy


class Clock(Protocol):
    def mark(self) -> object: ...
    def elapsed_ms(self, start: object, end: object) -> float: ...
    def sync(self) -> None: ...


class HostClock:
    """Wall time on the host; `now` is injectable for tests."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now

    def mark(self) -> float:
        return self._now()

    def elapsed_ms(self, start: object, end: object) -> float:
        return (float(end) - float(start)) * 1e3  # type: ignore[arg-type]

    def sync(self) -> None:
        return None


class CudaClock:
    """CUDA events on the current stream: device time, read after synchronising once."""

    def mark(self) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def elapsed_ms(self, start: object, end: object) -> float:
        end.synchronize()  # type: ignore[attr-defined]
        return float(start.elapsed_time(end))  # type: ignore[attr-defined]

    def sync(self) -> None:
        torch.cuda.synchronize()


def clock_for(device: str | torch.device) -> Clock:
    return CudaClock() if torch.device(device).type == "cuda" else HostClock()


def sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_calls(fn: Callable[[], object], iters: int, clock: Clock, warmup: int = 0) -> list[float]:
    """Per-call milliseconds of `fn`, after `warmup` untimed calls; marks are read after the loop."""
    for _ in range(warmup):
        fn()
    clock.sync()
    marks = [clock.mark()]
    for _ in range(iters):
        fn()
        marks.append(clock.mark())
    clock.sync()
    return [clock.elapsed_ms(a, b) for a, b in zip(marks, marks[1:])]


def time_block(fn: Callable[[], object], clock: Clock) -> float:
    """Milliseconds of one call of `fn` (synchronised before and after)."""
    clock.sync()
    start = clock.mark()
    fn()
    end = clock.mark()
    clock.sync()
    return clock.elapsed_ms(start, end)


def rotating_rounds(methods: dict[str, Callable[[], list[float]]], rounds: int,
                    on_round: Callable[[int, str], None] | None = None) -> dict[str, list[list[float]]]:
    """Run each method once per round, the order rotated by one each round. Returns samples per round."""
    names = list(methods)
    out: dict[str, list[list[float]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for name in order:
            if on_round:
                on_round(r, name)
            out[name].append(methods[name]())
    return out


def spread(samples: Sequence[float]) -> Spread:
    if not samples:
        raise ValueError("no samples")
    xs = sorted(float(x) for x in samples)
    med = statistics.median(xs)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    rel = (q3 - q1) / med if med else 0.0
    return Spread(n=len(xs), median=med, q1=q1, q3=q3, min=xs[0], max=xs[-1], rel_iqr=rel, noisy=rel > NOISY_REL_IQR)


@dataclass
class Timed:
    """Samples of one measurement with their derived spread."""

    samples: list[float]

    @property
    def spread(self) -> Spread:
        return spread(self.samples)

    @property
    def median(self) -> float:
        return self.spread.median
