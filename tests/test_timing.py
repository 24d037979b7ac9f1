"""lab/measure/timing.py: spread statistics, rotating rounds, the first-call timer (with a fake clock)."""

from __future__ import annotations

import pytest

from lab.measure.timing import HostClock, first_call, rotating_rounds, spread, time_calls


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
