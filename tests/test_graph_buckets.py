"""lab/experiments/graph_buckets.py: the bucket ladders and the rule."""

from __future__ import annotations

import pytest

from lab.experiments import graph_buckets as gb


def test_bucket_ladders_and_rule() -> None:
    assert gb.ladder("vllm", 64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]  # vLLM's default, cut at 64
    assert gb.ladder("pow2", 64) == [1, 2, 4, 8, 16, 32, 64] and gb.ladder("pow2", 48)[-1] == 48
    assert gb.ladder("per-size", 5) == [1, 2, 3, 4, 5]
    assert gb.bucket([1, 2, 4, 8], 3) == 4 and gb.bucket([1, 2, 4, 8], 8) == 8
    with pytest.raises(ValueError):
        gb.bucket([1, 2], 3)
    assert gb.waste([1, 2, 3], [1, 2, 3]) == 0 and gb.waste([1, 4], [3]) == pytest.approx(0.25)
    assert gb.expected_ms([2, 4], {2: 1.0, 4: 3.0}, [1, 2, 3]) == pytest.approx(5 / 3)
    assert gb.winner({"a": 1.0, "b": 0.4}, {"a": 1, "b": 2}, {"a": 9, "b": 3}) == "b"
    assert gb.winner({"a": None, "b": None}, {"a": 1.0, "b": 1.01}, {"a": 9, "b": 3}) == "b"  # tie: fewer graphs
    assert gb.winner({"a": None, "b": None}, {"a": 1.0, "b": 1.5}, {"a": 9, "b": 3}) == "a"
