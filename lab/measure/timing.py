"""Measurements that keep their raw samples, and the one clock every measurement reads.

- `Clock`: host time (perf_counter) on the CPU; CUDA events on the GPU (the device's own time
  between two points of a stream, read after one synchronisation). `clock_for(device)` picks one.
- `time_calls`: warm up, synchronise, put a mark after each call, return the per-call samples.
- `first_call`: a one-off call (a compile's first call, a warm-up, a capture), synchronised before
  and after and timed on the host: its cost is host work (tracing, code generation, compiling),
  which device events would only see as an idle stream.
- `rotating_rounds`: several rounds with the methods in rotating order, so drift and thermal state
  hit every method alike; with a `HostIndex`, each turn between two samples of the host-speed index.
- `time_methods`: the lab's one way to time a set of methods: `time_calls` of each in `rotating_rounds`,
  the raw samples kept per round (what `ctx.timing` and `ctx.speedup` take to give their intervals).
  A method that times itself (a decode marking every step: `StepMethod.decode`) goes to `rotating_rounds`.
- `compile_first_call`: torch.compile a function and time its first call apart (`setup_s`), never mixed
  into the steady samples.
- `spread`: median, quartiles and a noise flag derived from the samples (as torch.utils.benchmark).
- `warm_until_steady` and `still_improving`: the warm-up rule of a fresh process (time, agreement, no more
  improvement) and the drift test on the rounds kept after it (the sentinel's: lab.experiments.sentinel).

Why not `torch.utils.benchmark.Timer` or `triton.testing.do_bench`? Both time one statement
called over and over, in isolation: Timer reads the host clock around blocks of calls with a device
synchronisation at each end, do_bench records CUDA events around each call and writes a 256 MB
buffer between calls to flush L2. The lab's main measurement is a whole decode: a stateful sequence
of steps, each advancing the position, timed by a mark after every step, methods interleaved in
rotating rounds, the raw per-step samples kept; that needs a stream of marks, not a repeated call.
For the single-kernel ceilings (`lab.step.ceilings`: a copy, a matmul, a graph replay) do_bench would
fit, but it needs Triton (absent on CPU hosts and in the `cuda-notriton` image), its L2 flush adds
a kernel between calls, and it returns quantiles rather than every sample; Timer on a GPU measures
host time including the synchronisation. So every time the lab takes goes through one `Clock`,
with the same code on the CPU and the GPU.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Protocol, Sequence, TypeVar

import torch

from lab import console, heartbeat
from lab.contract import intervals
from lab.contract.results import Spread
from lab.measure import profiler_guard
from lab.measure.hostspeed import HostIndex
from lab.measure.dynamo_tools import quiet_dynamo
from lab.measure.opprofile import enable_cpp_kernel_profile

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


def sync(device: str | torch.device | None) -> None:
    """Wait for `device`'s queued work (a CUDA device; nothing on the CPU or for None)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


T = TypeVar("T")


def first_call(fn: Callable[..., T], *args: Any, device: str | torch.device | None = None,
               clock: HostClock | None = None) -> tuple[T, float]:
    """`fn(*args)` once, the device synchronised before and after: (its result, seconds on the host).

    For one-off costs (a compile's first call, a warm-up, a capture) that are never mixed into
    steady-state samples. `device`: the device whose queued work must be finished before the clock
    starts and before it stops (None: nothing to wait for). `clock`: injectable for tests."""
    host = clock or HostClock()
    sync(device)
    start = host.mark()
    result = fn(*args)
    sync(device)
    return result, host.elapsed_ms(start, host.mark()) / 1e3


def time_calls(fn: Callable[[], object], iters: int, clock: Clock, warmup: int = 0) -> list[float]:
    """Per-call milliseconds of `fn`, after `warmup` untimed calls; marks are read after the loop. A timed section
    (lab.console.timed: the console's heartbeat keeps out of it while its promise allows, and counts what it writes).

    The samples are taken in stretches (`stretch_calls`: about lab.heartbeat.stretch_s each, by the pace of the
    warm-up and of the stretches before), each its own sampling section; between two stretches, a gap where the
    heartbeat may speak, and no sample: a stretch's first mark comes after the gap, so every sample is one call
    between two marks with nothing else between them, as in one unbroken loop.

    Refused (lab.measure.profiler_guard.ProfilerResidue) after a profiler session left CUPTI attached."""
    what = f"timing {getattr(fn, '__name__', 'a call')}"
    profiler_guard.check_clean(what)
    stretches: list[list[Any]] = []
    with console.timed(what, sampling=False):
        began = heartbeat.now()
        for _ in range(warmup):
            fn()
        clock.sync()
        pace = (heartbeat.now() - began) / warmup if warmup else None
        done = last = 0
        while done < iters:
            last = stretch_calls(iters - done, pace, last)
            began = heartbeat.now()
            with console.timed(what):  # a write counts only from a stretch's first mark to its last
                marks = [clock.mark()]
                for _ in range(last):
                    fn()
                    marks.append(clock.mark())
            pace = (heartbeat.now() - began) / last
            stretches.append(marks)
            done += last
        clock.sync()  # (what is queued when the last mark is: nothing the host writes now moves it)
    return [clock.elapsed_ms(a, b) for marks in stretches for a, b in zip(marks, marks[1:])]


def stretch_calls(left: int, pace: float | None, last: int) -> int:
    """How many calls the next stretch of samples takes (time_calls): about lab.heartbeat.stretch_s at `pace`
    (seconds a call, by the heartbeat's clock; None: not known yet, one call), at most four times the `last`
    stretch (a pace read from one fast call does not commit to a long stretch), at least one, at most `left`."""
    if pace is None:
        return min(left, 1)
    most = left if pace <= 0 else max(1, int(heartbeat.stretch_s() / pace))
    return max(1, min(left, most, 4 * last if last else most))


K = TypeVar("K", bound=Hashable)


def rotating_rounds(methods: Mapping[K, Callable[[], list[float]]], rounds: int,
                    index: HostIndex | None = None) -> dict[K, list[list[float]]]:
    """Run each method once per round, the order rotated by one each round. Returns samples per round. Each
    method's turn is a timed section named "<method> in round <n>" (lab.console.timed; a write counts against it
    when it lands in a sampling loop of time_calls inside, not in a warm-up or prefill). With `index`, each turn runs
    between two samples of the host-speed index (lab.measure.hostspeed), kept there by the method's name.

    Refused (lab.measure.profiler_guard.ProfilerResidue) after a profiler session left CUPTI attached, and
    checked again before every round."""
    names = list(methods)
    out: dict[K, list[list[float]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        profiler_guard.check_clean(f"round {r + 1} of {', '.join(map(str, names))}")
        for name in order:
            with console.timed(f"{name} in round {r + 1}", sampling=False):  # its samples' time_calls counts
                out[name].append(methods[name]() if index is None else index.turn(str(name), methods[name]))
    if index is not None:
        index.close()
    return out


def time_methods(methods: Mapping[K, Callable[[], object]], clock: Clock, rounds: int, iters: int, warmup: int = 2,
                 index: HostIndex | None = None) -> dict[K, list[list[float]]]:
    """Per-call ms of each method, one list per round: `rounds` rounds in rotating order (`rotating_rounds`, with the
    host-speed `index` if given), `iters` timed calls after `warmup` untimed ones per turn (`time_calls`)."""
    return rotating_rounds({name: functools.partial(time_calls, f, iters, clock, warmup) for name, f in methods.items()},
                           rounds, index=index)


def flat(per_round: Sequence[Sequence[float]]) -> list[float]:
    """The samples of all rounds in one list (a timing recorded without its rounds' interval)."""
    return [x for r in per_round for x in r]


@dataclass
class Compiled:
    fn: Callable[..., Any]
    setup_s: float  # the first call: tracing, lowering, code generation, C++/Triton compilation


def compile_first_call(fn: Callable[..., Any], args: tuple[Any, ...], device: torch.device | str,
                       label: str = "", reset: bool = False, **compile_kwargs: Any) -> Compiled:
    """torch.compile `fn` and make the first call (timed, synchronised, Dynamo's warnings and what the call prints kept
    quiet); generated C++ kernels are profilable. `reset`: torch._dynamo.reset() first, a compile from nothing.
    The console says "compiling <fn's name>, <label> (first call)": `label` tells apart compiles of one function."""
    if reset:
        torch._dynamo.reset()
    compiled = torch.compile(fn, **compile_kwargs)
    name = getattr(fn, "__name__", type(fn).__name__) + (f", {label}" if label else "")
    with (enable_cpp_kernel_profile(), torch.no_grad(), console.activity(f"compiling {name} (first call)"),
          quiet_dynamo(), contextlib.redirect_stdout(io.StringIO())):
        _, seconds = first_call(compiled, *args, device=device)
    return Compiled(compiled, seconds)


def spread(samples: Sequence[float], rounds: Sequence[Sequence[float]] | None = None) -> Spread:
    """Median, quartiles and the noise flag of `samples`; with the per-round samples behind them, also the 95%
    interval of the median (a bootstrap over rounds, lab.contract.intervals; none from fewer than two rounds)."""
    if not samples:
        raise ValueError("no samples")
    xs = sorted(float(x) for x in samples)
    med = statistics.median(xs)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    rel = (q3 - q1) / med if med else 0.0
    ci = intervals.median_interval(rounds) if rounds is not None else None
    return Spread(n=len(xs), median=med, q1=q1, q3=q3, min=xs[0], max=xs[-1], rel_iqr=rel, noisy=rel > NOISY_REL_IQR,
                  ci_low=None if ci is None else ci.low, ci_high=None if ci is None else ci.high)


@dataclass(frozen=True)
class WarmUp:
    """How a warm-up went: its rounds, the seconds they took, each round's median (ms), and whether it ended steady
    (False: `max_rounds` ran out first)."""

    rounds: int
    seconds: float
    medians: tuple[float, ...]
    steady: bool


def warm_until_steady(round_fn: Callable[[], float], *, min_s: float, agree: float, window: int, max_rounds: int,
                      budget_s: float = math.inf, now: Callable[[], float] = time.monotonic) -> WarmUp:
    """Run warm-up rounds (`round_fn` runs one and returns its median) until the process has settled, at most
    `max_rounds` rounds and at most `budget_s` seconds (the round under way when the budget runs out is finished).
    Ending on either limit is an unsteady warm-up (`steady` False): the caller reports it, it does not wait it out.

    Settled is all three of: at least `min_s` seconds have passed; the last `window` round medians agree within
    `agree` (the largest at most `agree` above the smallest); the last is at most `agree` above the best seen (the
    rounds stopped improving, and did not settle on a level above one they already reached). Why the time as well
    as the agreement: a fresh process can start on a slow plateau whose rounds agree with each other (an H200 host
    ran eager at 5.9 ms a step for its first rounds, then at 3.4 ms), so agreement alone stops on the plateau; the
    time floor waits out a slow start shorter than `min_s`, and `still_improving` catches one that lasts into the
    kept rounds."""
    if window < 1 or max_rounds < 1:
        raise ValueError(f"need window >= 1 and max_rounds >= 1 (got window={window}, max_rounds={max_rounds})")
    start = now()
    medians: list[float] = []
    while len(medians) < max_rounds:
        medians.append(float(round_fn()))
        elapsed = now() - start
        last = medians[-window:]
        if (elapsed >= min_s and len(last) == window and max(last) <= min(last) * (1 + agree)
                and medians[-1] <= min(medians) * (1 + agree)):
            return WarmUp(len(medians), elapsed, tuple(medians), True)
        if elapsed >= budget_s:
            break
    return WarmUp(len(medians), now() - start, tuple(medians), False)


def still_improving(medians: Sequence[float], agree: float) -> bool:
    """The drift test on kept rounds: the last round's median is below the first's by more than `agree` (a fraction
    of the first), so the process was still getting faster while it was measured and its median is not its steady
    state.

    Why the two ends and not a rank trend test: the kept rounds are few (5), and the shape to catch is a slow
    plateau that ends inside them (5.90, 5.94, 5.91, 5.68, 3.40 ms): a Mann-Kendall test over those five gives
    S = -6, p = 0.12, so it would accept them; the last-against-first drop is 42%. A drop of more than `agree`
    between the first and the last round is also a change the checks built on the median (10%) would see. A false
    alarm costs one retake. A process that got slower is not still warming up: it is not this test's case."""
    return len(medians) >= 2 and medians[0] - medians[-1] > agree * medians[0]
