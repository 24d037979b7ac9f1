"""lab/measure/timing.py: spread statistics, rotating rounds, the first-call timer (with a fake clock)."""

from __future__ import annotations

import pytest

from lab.measure.timing import HostClock, first_call, rotating_rounds, spread, still_improving, time_calls, warm_until_steady


def test_spread_and_noise_flag() -> None:
    quiet = spread([10.0, 10.1, 9.9, 10.0, 10.05])
    assert quiet.median == 10.0 and not quiet.noisy and quiet.n == 5
    noisy = spread([10.0, 14.0, 7.0, 12.0, 9.0])
    assert noisy.noisy and noisy.min == 7.0 and noisy.max == 14.0


def test_time_calls_with_fake_clock() -> None:
    """Each sample is one call between two marks, whatever stretches the loop is cut into (warm-up untimed)."""
    t = [0.0]
    durations = iter([5.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])

    def call() -> None:
        t[0] += next(durations) / 1e3

    samples = time_calls(call, iters=7, clock=HostClock(now=lambda: t[0]), warmup=1)
    assert samples == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])


def test_a_stretch_of_samples_lasts_about_its_share_of_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """lab.heartbeat.stretch_s at the pace known (1.25 s at the 10 s interval), one call while none is, at most four
    times the last stretch, never more than is left, never none."""
    from lab.measure.timing import stretch_calls

    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "10")
    assert stretch_calls(100, None, 0) == 1 and stretch_calls(0, None, 0) == 0
    assert stretch_calls(1000, 0.01, 0) == 125  # the warm-up's pace: a whole stretch at once
    assert stretch_calls(1000, 0.01, 2) == 8  # after a stretch of two: four times that
    assert stretch_calls(1000, 0.01, 100) == 125 and stretch_calls(50, 0.01, 100) == 50
    assert stretch_calls(1000, 3.0, 100) == 1  # a call longer than a stretch: one a stretch
    assert stretch_calls(1000, 0.0, 7) == 28  # a clock that did not move: only the growth limits it


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


class _Rounds:
    """A fake round function on a fake clock: each round takes `seconds` and returns the next median."""

    def __init__(self, medians: list[float], seconds: float = 0.5) -> None:
        self.medians, self.seconds, self.t, self.calls = medians, seconds, 0.0, 0

    def now(self) -> float:
        return self.t

    def __call__(self) -> float:
        self.t += self.seconds
        self.calls += 1
        return self.medians[min(self.calls, len(self.medians)) - 1]


RULE = {"min_s": 10.0, "agree": 0.05, "window": 3, "max_rounds": 100}


def test_warm_up_does_not_stop_on_a_slow_plateau_that_then_drops() -> None:
    """The H200 case: rounds agreeing at 5.9 ms, then the process settles at 3.4 ms. Agreement alone (two rounds)
    stopped on the plateau; the rule waits out `min_s` and ends on the fast level."""
    fake = _Rounds([5.90, 5.94, 5.91, 5.92, 5.90, 5.93, 5.68] + [3.40, 3.42, 3.41] * 30)
    warm = warm_until_steady(fake, now=fake.now, **RULE)
    assert warm.steady and warm.seconds >= 10.0 and warm.rounds == 20
    assert warm.medians[-3:] == (3.42, 3.41, 3.40) and len(warm.medians) == warm.rounds
    assert abs(warm.medians[1] - warm.medians[0]) <= 0.05 * warm.medians[0]  # where the two-round rule stopped


def test_warm_up_on_a_steady_process_stops_once_min_s_has_passed() -> None:
    fake = _Rounds([2.70, 2.71, 2.69] * 40, seconds=0.75)
    warm = warm_until_steady(fake, now=fake.now, **RULE)
    assert warm.steady and warm.rounds == 14 and fake.calls == 14  # 13 x 0.75 s < 10 s <= 14 x 0.75 s
    assert warm.seconds == pytest.approx(10.5)
    quick = _Rounds([2.70, 2.71, 2.69] * 40, seconds=0.75)
    assert warm_until_steady(quick, now=quick.now, **(RULE | {"min_s": 0.0})).rounds == 3  # the window, no sooner


def test_warm_up_does_not_settle_above_the_best_round_and_max_rounds_caps_it() -> None:
    """A lucky fast round, then a plateau 20% above it: the plateau's rounds agree, but they are not the best the
    process reached, so it is not settled; `max_rounds` ends the warm-up, unsteady."""
    fake = _Rounds([3.0] + [3.6] * 200)
    warm = warm_until_steady(fake, now=fake.now, **RULE)
    assert not warm.steady and warm.rounds == 100 and fake.calls == 100
    noisy = _Rounds([3.0, 4.0] * 100)  # rounds that never agree within 5%
    assert not warm_until_steady(noisy, now=noisy.now, **(RULE | {"max_rounds": 7})).steady and noisy.calls == 7
    with pytest.raises(ValueError):
        warm_until_steady(fake, now=fake.now, **(RULE | {"window": 0}))


def test_the_budget_ends_an_unsteady_warm_up_after_the_round_under_way() -> None:
    noisy = _Rounds([3.0, 6.0] * 100)  # a host whose speed keeps moving: never steady
    warm = warm_until_steady(noisy, now=noisy.now, **(RULE | {"budget_s": 20.0}))
    assert not warm.steady and warm.rounds == 40 and warm.seconds == 20.0
    calm = _Rounds([2.7] * 100)  # a steady host settles at min_s, well inside the budget
    assert warm_until_steady(calm, now=calm.now, **(RULE | {"budget_s": 20.0})).rounds == 20


def test_still_improving_is_a_drop_from_the_first_kept_round_to_the_last() -> None:
    assert still_improving([5.90, 5.94, 5.91, 5.68, 3.40], 0.05)  # the kept rounds of the H200 case
    assert not still_improving([2.70, 2.74, 2.66, 2.71, 2.68], 0.05)  # steady within 5%
    assert not still_improving([2.70, 2.80, 2.90, 3.00, 3.10], 0.05)  # slower: not warming up
    assert still_improving([3.0, 2.8], 0.05) and not still_improving([3.0, 2.9], 0.05)
    assert not still_improving([3.0], 0.05) and not still_improving([], 0.05)
