"""lab/run/budget.py: when a start with `--stop-after` stops, and what it expects an experiment to take."""

from __future__ import annotations

import pytest

from lab.contract.results import Record
from lab.run.budget import Budget, earlier_durations


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_without_an_estimate_it_stops_once_the_budget_is_spent_but_never_before_the_first() -> None:
    clock = Clock()
    budget = Budget(100.0, clock.t, clock)
    clock.t += 250  # past the budget before anything ran (a slow setup): the first experiment runs all the same
    assert budget.stop_before("a", ["a", "b"], ran=0) is None
    clock.t = 1000.0 + 100  # exactly spent: an experiment of unknown length may still start
    assert budget.stop_before("b", ["b"], ran=1) is None
    clock.t += 0.5
    stop = budget.stop_before("b", ["b", "c"], ran=1)
    assert stop is not None and stop.code == "stop_after" and stop.next == "b" and stop.not_started == ["b", "c"]
    assert stop.expected_s is None and stop.budget_s == 100.0 and 100.0 < stop.elapsed_s < 101.0
    assert "not known before it first runs" in stop.message and "--resume" in stop.message


def test_an_experiment_expected_to_cross_the_budget_is_not_started_while_time_is_left() -> None:
    clock = Clock()
    budget = Budget(100.0, clock.t, clock, expected={"slow": 80.0, "quick": 5.0})
    clock.t += 30
    assert budget.stop_before("quick", ["quick", "slow"], ran=1) is None  # 30 + 5 fits
    stop = budget.stop_before("slow", ["slow"], ran=1)  # 30 + 80 does not
    assert stop is not None and stop.expected_s == 80.0 and "slow took 80 s in an earlier start" in stop.message
    clock.t = 1000.0 + 20
    assert budget.stop_before("slow", ["slow"], ran=1) is None  # 20 + 80 fits exactly


def test_the_first_experiment_longer_than_the_whole_budget_runs_with_a_warning() -> None:
    budget = Budget(60.0, 0.0, Clock(0.0), expected={"long": 90.0, "short": 10.0})
    assert budget.stop_before("long", ["long"], ran=0) is None
    warning = budget.too_long_alone("long")
    assert warning is not None and "took 90 s" in warning and "--set" in warning
    assert budget.too_long_alone("short") is None and budget.too_long_alone("unknown") is None


@pytest.mark.parametrize("seconds", [0.0, -5.0, float("nan")])
def test_a_budget_that_is_not_positive_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="--stop-after"):
        Budget(seconds, 0.0)


def test_earlier_durations_come_from_records_that_ran_and_are_not_kept() -> None:
    def rec(i: str, status: str, duration: float, started: str = "2026-12-01T00:00:00+00:00") -> Record:
        return Record(id=i, title=i, status=status, started_at=started, duration_s=duration)

    records = [rec("ok", "OK", 40.0), rec("failed", "FAILED", 12.5), rec("cut", "NOT_RUN", 300.0),
               rec("never", "NOT_RUN", 0.0, started="")]
    assert earlier_durations(records) == {"failed": 12.5, "cut": 300.0}
