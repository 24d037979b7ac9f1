"""Break-even arithmetic, amortisation, spread statistics, rotating rounds, the first-call timer and the
ceilings' measurements (with a fake clock)."""

from __future__ import annotations

import pytest

from lab.measure.breakeven import amortised_ms_per_call, amortised_seconds, break_even_calls
import torch

from lab.step import ceilings
from lab.measure.timing import HostClock, first_call, rotating_rounds, spread, time_calls


def test_break_even_matches_the_chapter() -> None:
    # 25.7 s cold to save 6.9 ms per step: 3,725 steps (the chapter's 3,715 came from unrounded times)
    assert break_even_calls(25.7, 42.0, 35.1) == 3725
    assert break_even_calls(0.18, 16.5, 3.4) == 14  # the graph: pays back in 14 steps
    assert break_even_calls(0.0, 2.0, 1.0) == 0


def test_break_even_never_when_nothing_is_saved() -> None:
    assert break_even_calls(1.0, 1.0, 1.0) is None
    assert break_even_calls(1.0, 1.0, 2.0) is None
    with pytest.raises(ValueError):
        break_even_calls(-1.0, 1.0, 0.5)


def test_amortised() -> None:
    assert amortised_seconds(10.0, 5.0, 2000) == pytest.approx(20.0)
    assert amortised_ms_per_call(10.0, 5.0, 2000) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        amortised_ms_per_call(1.0, 1.0, 0)


def test_spread_and_noise_flag() -> None:
    quiet = spread([10.0, 10.1, 9.9, 10.0, 10.05])
    assert quiet.median == 10.0 and not quiet.noisy and quiet.n == 5
    noisy = spread([10.0, 14.0, 7.0, 12.0, 9.0])
    assert noisy.noisy and noisy.min == 7.0 and noisy.max == 14.0


def test_time_calls_with_fake_clock() -> None:
    ticks = iter([0.0, 0.001, 0.003, 0.006])
    clock = HostClock(now=lambda: next(ticks))
    samples = time_calls(lambda: None, iters=3, clock=clock)
    assert samples == pytest.approx([1.0, 2.0, 3.0])


def test_rotating_rounds_rotate_the_order() -> None:
    order: list[str] = []
    methods = {name: (lambda name=name: order.append(name) or [1.0]) for name in "abc"}
    out = rotating_rounds(methods, rounds=3)
    assert order == list("abc" "bca" "cab")
    assert all(len(v) == 3 for v in out.values())


def _fake_clock(*ticks: float) -> HostClock:
    it = iter(ticks)
    return HostClock(now=lambda: next(it))


def test_first_call_returns_the_result_and_its_seconds() -> None:
    calls: list[tuple[int, int]] = []
    result, seconds = first_call(lambda a, b: calls.append((a, b)) or a + b, 2, 3, device="cpu",
                                 clock=_fake_clock(10.0, 12.5))
    assert result == 5 and seconds == pytest.approx(2.5) and calls == [(2, 3)]
    with pytest.raises(ZeroDivisionError):  # an error in the call propagates; nothing is timed
        first_call(lambda: 1 / 0, clock=_fake_clock(0.0, 1.0))


def test_ceilings_read_the_clock_they_are_given() -> None:
    """Each repeat is one call between two marks (after the untimed warm-up): the fake clock's ticks are
    1, 2 and 4 ms apart, so the samples follow from the arithmetic alone."""
    cpu = torch.device("cpu")
    assert ceilings.launch_us_eager(cpu, ops=100, repeats=3, clock=_fake_clock(0.0, 0.001, 0.003, 0.007)) \
        == pytest.approx([10.0, 20.0, 40.0])  # us per op: ms * 1000 / ops
    nbytes = 4 << 20
    gbps = ceilings.copy_bandwidth_gbps(cpu, nbytes, repeats=2, clock=_fake_clock(0.0, 0.001, 0.003))
    assert gbps == pytest.approx([2 * nbytes / 1e-3 / 1e9, 2 * nbytes / 2e-3 / 1e9])
    tf = ceilings.matmul_tflops(cpu, torch.float32, 64, repeats=1, clock=_fake_clock(0.0, 0.5))
    assert tf == pytest.approx([2 * 64 ** 3 / 0.5 / 1e12])
