"""lab/heartbeat.py: the rule that decides when the console speaks beside a measurement, and the count of the writes
that land inside a timed section."""

from __future__ import annotations

import pytest

from lab import heartbeat


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch):
    """A clock that moves only when told (t[0], seconds), the promise at 10 s, the silence starting at 0."""
    t = [0.0]
    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "10")
    heartbeat.use_clock(lambda: t[0])
    heartbeat.reset()
    yield t
    heartbeat.use_clock(None)
    heartbeat.take_disturbed()


def test_outside_a_timing_it_speaks_at_the_interval_and_at_a_timings_edge_at_half_of_it(clock) -> None:
    clock[0] = 4.9
    assert not heartbeat.due(live=False) and not heartbeat.due(live=False, edge=True)
    clock[0] = 5.0
    assert heartbeat.due(live=False, edge=True) and not heartbeat.due(live=False)
    clock[0] = 10.0
    assert heartbeat.due(live=False)


def test_inside_a_timing_it_waits_until_the_promise_would_break(clock) -> None:
    """Inside a timed section neither a redraw of the live display (due every half second outside) nor a line is
    due before the silence reaches the interval."""
    clock[0] = 0.5
    assert heartbeat.due(live=True)
    heartbeat.enter("eager in round 1")
    try:
        clock[0] = 9.9
        assert not heartbeat.due(live=True) and not heartbeat.due(live=False) \
            and not heartbeat.due(live=False, edge=True)
        clock[0] = 10.0
        assert heartbeat.due(live=True) and heartbeat.due(live=False)
    finally:
        heartbeat.leave()


def test_what_is_shown_inside_a_timing_is_counted_against_the_outermost_section(clock) -> None:
    heartbeat.shown()  # outside: not counted
    heartbeat.enter("eager in round 2")
    heartbeat.enter("timing step")
    heartbeat.shown()
    heartbeat.leave()
    heartbeat.shown()
    heartbeat.leave()
    heartbeat.enter("graph in round 2")
    heartbeat.shown()
    heartbeat.leave()
    assert heartbeat.STATE.sections == []
    assert heartbeat.take_disturbed() == {"eager in round 2": 2, "graph in round 2": 1}
    assert heartbeat.take_disturbed() == {}  # taken once


def test_a_write_starts_the_silence_again(clock) -> None:
    clock[0] = 30.0
    assert heartbeat.quiet() >= 30
    heartbeat.shown()
    assert heartbeat.quiet() < 1 and not heartbeat.due(live=False, edge=True)


def test_the_shortest_interval_is_a_second(clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """LAB_PROGRESS_EVERY_S=0 says every step: the heartbeat still waits a second (half of it at an edge)."""
    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "0")
    clock[0] = 0.4
    assert not heartbeat.due(live=False, edge=True)
    clock[0] = 0.5
    assert heartbeat.due(live=False, edge=True) and not heartbeat.due(live=False)
    clock[0] = 1.0
    assert heartbeat.due(live=False)


def test_a_section_that_takes_no_samples_counts_nothing_until_one_inside_does(clock) -> None:
    heartbeat.enter("growing compile in round 1", sampling=False)
    heartbeat.shown()  # the turn's warm-up: not counted
    heartbeat.enter("timing one", sampling=True)
    heartbeat.shown()  # its samples: counted against the turn
    heartbeat.leave()
    heartbeat.leave()
    assert heartbeat.take_disturbed() == {"growing compile in round 1": 1}


def test_an_edge_inside_a_turn_is_a_gap_unless_samples_are_being_taken(clock) -> None:
    """Between two stretches of a timing's samples (inside a method's turn, which takes none itself) the edge rule
    holds (half the interval); an edge inside a sampling section is no gap, and waits for the promise."""
    heartbeat.enter("eager in round 1", sampling=False)
    try:
        clock[0] = 5.0
        assert not heartbeat.sampling() and heartbeat.due(live=False, edge=True) and not heartbeat.due(live=False)
        heartbeat.enter("timing step", sampling=True)
        try:
            assert heartbeat.sampling() and not heartbeat.due(live=False, edge=True)
            clock[0] = 10.0
            assert heartbeat.due(live=False, edge=True)
        finally:
            heartbeat.leave()
    finally:
        heartbeat.leave()
    assert heartbeat.take_disturbed() == {}
