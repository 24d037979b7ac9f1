"""lab/experiments/model_scaling.py: its rule, on fed numbers."""

from __future__ import annotations

from lab.experiments import model_scaling as ms
from lab.contract import intervals
from lab.contract.names import Method


def test_model_scaling_rule() -> None:
    iv = intervals.Interval
    assert ms.gain_trend(iv(4.8, 5.2), iv(1.9, 2.1)) == "shrinks" and ms.gain_trend(iv(1.9, 2.1), iv(4.8, 5.2)) == "grows"
    # overlapping intervals hold, however far apart the medians: the rule is the intervals', not a 5% threshold
    assert ms.gain_trend(iv(1.5, 2.5), iv(2.4, 3.0)) == "holds"
    assert ms.gain_trend(None, iv(1.0, 1.1)) == "unknown"
    assert ms.priority(("a", "b"), ("float32", "bfloat16"), (8, 1))[:3] == [(1, "float32", "a"), (1, "float32", "b"),
                                                                           (1, "bfloat16", "a")]
    shrink = {"method": Method.GRAPH, "dtype": "float32", "batch": 1, "first": 5.4, "last": 1.9, "small": "gpt2-124M",
              "large": "gpt2-1.5B", "trend": "shrinks"}
    grow = dict(shrink, batch=8, first=2.0, last=2.5, trend="grows")
    assert "data agree with" in ms.sentence([shrink]) and "5.40x (gpt2-124M) to 1.90x (gpt2-1.5B)" in ms.sentence([shrink])
    assert "partly agree" in ms.sentence([shrink, grow]) and "1 of 2" in ms.sentence([shrink, grow])
    assert "do not agree" in ms.sentence([grow]) and "cannot be judged" in ms.sentence([])
