"""lab.contract.marks: numbers judged by their 95% intervals where both sides have one (the rule of
lab.contract.intervals), by the older rule, saying so, where either has none; renamed units."""

from __future__ import annotations

from lab.contract import metrics as M
from lab.contract.marks import Value, judge

MANIFEST = {"profile": {"model": {"name": "gpt2-124M", "n_layer": 12}, "max_len": 256}}  # the same on both sides


def v(value, unit: str = "ms", ci: tuple[float, float] | None = None, iqr: tuple[float, float] | None = None,
      **kw) -> Value:
    low, high = ci if ci else (None, None)
    q1, q3 = iqr if iqr else (None, None)
    return Value(value, unit, {}, q1, q3, ci_low=low, ci_high=high, manifest=MANIFEST, **kw)


def test_overlapping_intervals_are_the_same_even_beyond_the_factor() -> None:
    verdict = judge(M.STEP_MS, v(1.0, ci=(0.8, 1.3)), v(1.5, ci=(1.2, 1.9)))
    assert verdict.mark == "same" and verdict.reason.startswith("95% intervals overlap")


def test_disjoint_intervals_are_better_or_worse_even_within_the_factor() -> None:
    slower = judge(M.STEP_MS, v(1.0, ci=(0.99, 1.01)), v(1.05, ci=(1.04, 1.06)))
    assert slower.mark == "worse" and slower.reason.startswith("disjoint 95% intervals")
    faster = judge(M.SPEEDUP_VS_EAGER, v(7.0, "x", ci=(6.9, 7.1)), v(7.3, "x", ci=(7.2, 7.4)))
    assert faster.mark == "better" and "higher is better" in faster.reason


def test_without_an_interval_on_either_side_the_older_rule_says_so() -> None:
    one_sided = judge(M.STEP_MS, v(1.0, ci=(0.99, 1.01)), v(1.05))
    assert one_sided.mark == "same" and one_sided.reason == "no 95% interval stored; within a factor of 1.1"
    iqr = judge(M.STEP_MS, v(1.0, iqr=(0.7, 1.4)), v(1.3, iqr=(1.1, 1.6)))
    assert (iqr.mark, iqr.reason) == ("same", "no 95% interval stored; interquartile ranges overlap")
    worse = judge(M.STEP_MS, v(1.0), v(2.0))
    assert (worse.mark, worse.reason) == ("worse", "no 95% interval stored; lower is better")


def test_an_interval_the_wrong_way_round_counts_as_none() -> None:
    assert judge(M.STEP_MS, v(1.0, ci=(1.2, 0.8)), v(1.05, ci=(1.0, 1.1))).reason.startswith("no 95% interval")


def test_renamed_units_and_categorical_values() -> None:
    assert judge(M.KERNELS_PER_STEP, v(8, "count"), v(8, "kernels")).mark == "same"
    assert judge(None, v("eager", ""), v("eager", "method")).mark == "same"
    assert judge(None, v("eager", ""), v("graph", "method")).mark == "changed"
    assert judge(M.KERNELS_PER_STEP, v(8, "count"), v(9, "kernels")).mark == "not comparable"
    assert judge(M.STEP_MS, v(1.0), v(1.0, "s")).mark == "not comparable"  # a scale, not a rename
