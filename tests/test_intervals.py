"""lab.contract.intervals: the block bootstrap over rounds and the rule that calls two figures the same."""

from __future__ import annotations

import statistics

import pytest

from lab.contract import intervals as I


def test_one_round_gives_no_interval_and_relation_says_unknown():
    assert I.median_interval([[1.0, 2.0, 3.0]]) is None
    assert I.ratio_interval([[1.0, 2.0]], [[1.0, 2.0]]) is None
    assert I.relation(None, I.Interval(1, 2)) is I.Relation.UNKNOWN


def test_the_interval_holds_the_median_and_is_deterministic():
    rounds = [[10.0, 10.2, 10.1], [11.0, 11.1, 11.3], [9.8, 9.9, 10.0], [10.5, 10.4, 10.6]]
    a, b = I.median_interval(rounds), I.median_interval(rounds)
    assert a == b  # fixed seed: the same samples give the same interval
    assert a.low <= 10.3 <= a.high
    assert 9.8 <= a.low and a.high <= 11.3


def test_a_drifting_round_widens_the_interval():
    steady = [[10.0, 10.1]] * 4
    drift = [[10.0, 10.1], [10.0, 10.1], [10.0, 10.1], [14.0, 14.1]]
    tight, wide = I.median_interval(steady), I.median_interval(drift)
    assert tight.high - tight.low < wide.high - wide.low


def test_paired_rounds_cancel_shared_drift():
    # each round's drift hits both methods alike: paired, the ratio stays near 2 with a narrow interval
    eager = [[2.0 * d, 2.0 * d] for d in (1.0, 1.5, 0.8, 1.2)]
    method = [[1.0 * d, 1.0 * d] for d in (1.0, 1.5, 0.8, 1.2)]
    ci = I.ratio_interval(eager, method)
    assert ci.contains(2.0)
    assert ci.high - ci.low < 0.5
    assert I.versus(ci, 1.0) is I.Relation.HIGHER
    apart = I.ratio_interval(eager, method, paired=False)  # the same rounds drawn on their own: drift not cancelled
    assert apart.contains(2.0) and apart.high - apart.low > ci.high - ci.low


def test_relation_overlap_is_same_disjoint_is_higher_or_lower():
    a = I.Interval(1.0, 2.0)
    assert I.relation(a, I.Interval(1.5, 3.0)) is I.Relation.SAME
    assert I.relation(a, I.Interval(2.1, 3.0)) is I.Relation.HIGHER
    assert I.relation(a, I.Interval(0.1, 0.9)) is I.Relation.LOWER
    assert I.within(I.Interval(0.9, 1.1), (0.8, 1.25)) is True
    assert I.within(I.Interval(0.9, 1.4), (0.8, 1.25)) is False
    assert I.within(None, (0.8, 1.25)) is None


def test_an_inverted_interval_is_refused():
    with pytest.raises(ValueError, match="above its high end"):
        I.Interval(2.0, 1.0)


def test_a_stored_speedups_interval_is_read_back_by_its_declaration() -> None:
    from lab.contract import metrics as M
    from lab.contract.results import Metric, Record
    from lab.run.context import stored_interval

    p = {"method": "graph", "batch": 1}
    rec = Record(id="x", title="x", status="OK", metrics=[
        Metric("speedup_vs_eager", 4.0, "x", p), Metric("speedup_ci_low", 3.8, "x", p),
        Metric("speedup_ci_high", 4.3, "x", p), Metric("speedup_ci_low", None, "x", {**p, "batch": 8}),
        Metric("speedup_ci_high", None, "x", {**p, "batch": 8})])
    ci = stored_interval(rec, M.SPEEDUP_VS_EAGER, **p)
    assert ci is not None and (ci.low, ci.high) == (3.8, 4.3)
    assert stored_interval(rec, M.SPEEDUP_VS_EAGER, method="graph", batch=8) is None  # stored empty: too few rounds
    with pytest.raises(KeyError):
        stored_interval(rec, M.SPEEDUP_VS_EAGER, method="graph", batch=64)  # nothing stored
    with pytest.raises(KeyError, match="declares no interval"):
        stored_interval(rec, M.STEP_MS, **p)


def test_pair_ratio_compares_each_pair_so_a_few_slow_rounds_on_one_side_do_not_decide_it():
    """Two identical processes taking turns on a host whose speed flips: 7 of 12 rounds of one side and 5 of the
    other's landed on a slow stretch (2x), most of them the same pairs'. Their pooled medians differ by 2x; the
    per-pair ratio is 1, and its interval holds it."""
    from lab.contract import intervals

    slow_a, slow_b = {0, 2, 3, 5, 8, 10, 11}, {2, 3, 6, 8, 11}
    a = [[3.0 * (2 if i in slow_a else 1) * (1 + 0.002 * (i % 3))] * 4 for i in range(12)]
    b = [[3.0 * (2 if i in slow_b else 1) * (1 + 0.002 * (i % 2))] * 4 for i in range(12)]
    pooled = statistics.median(x for r in a for x in r) / statistics.median(x for r in b for x in r)
    assert pooled == pytest.approx(2.0, abs=0.02)
    value, ci = intervals.pair_ratio(a, b)
    assert value == pytest.approx(1.0, abs=0.01) and ci is not None and ci.contains(1.0)


def test_pair_ratio_of_one_pair_has_no_interval_and_of_none_is_an_error():
    from lab.contract import intervals

    assert intervals.pair_ratio([[2.0, 2.0]], [[1.0]]) == (2.0, None)
    with pytest.raises(ValueError, match="no pair"):
        intervals.pair_ratio([[]], [[1.0]])


def test_a_ratio_that_moves_between_clusters_widens_the_clustered_interval():
    # three processes, each with six tight paired rounds: within each the arm is clearly faster or slower, but the
    # processes disagree; pooled as one process's rounds the interval would call it, clustered it must not
    first = [[[1.0]] * 6, [[1.0]] * 6, [[1.0]] * 6]
    moving = [[[0.995 + 0.0002 * r] for r in range(6)], [[1.004 + 0.0002 * r] for r in range(6)],
              [[0.999 + 0.0002 * r] for r in range(6)]]
    ci = I.clustered_ratio_interval(moving, first)
    assert ci is not None and ci.low < 0.996 and ci.high > 1.004
    assert I.versus(ci, 1.0) is I.Relation.SAME
    pooled = I.ratio_interval([r for c in moving for r in c], [r for c in first for r in c])
    assert pooled is not None and pooled.high - pooled.low < ci.high - ci.low
    # where every process agrees the clustered interval stays narrow and says so
    steady = [[[0.99 + 0.0002 * r] for r in range(6)] for _ in range(3)]
    ci = I.clustered_ratio_interval(steady, first)
    assert ci is not None and I.versus(ci, 1.0) is I.Relation.LOWER and ci.high - ci.low < 0.002
    assert ci == I.clustered_ratio_interval(steady, first)  # fixed seed
    assert I.clustered_ratio_interval(steady[:1], first[:1]) is None  # one cluster: no interval
    with pytest.raises(ValueError, match="different numbers of rounds"):
        I.clustered_ratio_interval([[[1.0], [1.0]]] * 2, [[[1.0]]] * 2)
