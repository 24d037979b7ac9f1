"""Break-even arithmetic, amortisation, spread statistics and rotating rounds (with a fake clock)."""

from __future__ import annotations

import pytest

from lab.costs import amortised_ms_per_call, amortised_seconds, break_even_calls
from lab.timing import HostClock, rotating_rounds, spread, time_calls


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
