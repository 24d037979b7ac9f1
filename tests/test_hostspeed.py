"""The host-speed index (lab.measure.hostspeed) and its statistics (lab.contract.hostspeed): fake clocks, seeded
data, and the H200 rounds of 2026-12-02 (tests/fixtures/hostspeed_h200_rounds.csv, every round of the shared file)."""

from __future__ import annotations

import csv
import math
import random
import statistics
from pathlib import Path

import pytest

from lab.contract import hostspeed as stats
from lab.contract.intervals import Interval
from lab.measure import hostspeed
from lab.measure.hostspeed import HostIndex
from lab.measure.timing import rotating_rounds

H200 = Path(__file__).parent / "fixtures" / "hostspeed_h200_rounds.csv"


def _h200() -> dict[str, list[float]]:
    with H200.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return {k: [float(r[k]) for r in rows] for k in ("eager", "graph", "loop")}


class _Clock:
    """A fake clock that the fake loop and the fake turns advance."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_the_workload_is_the_declared_loop() -> None:
    assert hostspeed.workload(4) == 0 + 1 + 4 + 9
    assert hostspeed.workload() == sum(i * i for i in range(hostspeed.LOOP))
    assert "10000" in hostspeed.WORKLOAD


def test_each_turn_runs_between_two_index_samples_and_shares_them_with_the_next() -> None:
    clock = _Clock()
    loops = iter([0.001, 0.002, 0.003, 0.004])  # each sample of the loop takes longer: the host slows down
    index = HostIndex(now=clock.now, work=lambda: clock.advance(next(loops)))
    order: list[str] = []
    index.turn("eager", lambda: (order.append("eager"), clock.advance(0.200)))  # 40 loops or more: samples of its own
    index.turn("graph", lambda: (order.append("graph"), clock.advance(0.200)))
    index.turn("eager", lambda: (order.append("eager"), clock.advance(0.200)))
    assert order == ["eager", "graph", "eager"]
    assert index.turns["eager"] == [pytest.approx((1.0, 2.0)), pytest.approx((3.0, 4.0))]
    assert index.turns["graph"] == [pytest.approx((2.0, 3.0))]  # the sample after eager's turn is the one before
    assert index.per_round("eager") == pytest.approx([1.5, 3.5])
    assert index.cost() == pytest.approx(0.010 / 0.600)  # four loops over three turns
    note = index.note()
    assert note["cost"] == pytest.approx(0.010 / 0.600, abs=1e-5) and note["turns"]["graph"] == [[2.0, 3.0]]
    assert note["workload"] == hostspeed.WORKLOAD and note["loop"] == hostspeed.LOOP


def test_rotating_rounds_keep_the_index_by_method_and_round() -> None:
    clock = _Clock()
    index = HostIndex(now=clock.now, work=lambda: clock.advance(0.001))
    out = rotating_rounds({"a": lambda: [1.0], "b": lambda: [2.0]}, rounds=3, index=index)
    assert out == {"a": [[1.0]] * 3, "b": [[2.0]] * 3}
    assert {k: len(v) for k, v in index.turns.items()} == {"a": 3, "b": 3}
    assert index.per_round("a") == pytest.approx([1.0, 1.0, 1.0])
    assert index.cost() is None  # the fake turns took no time on the fake clock


def test_the_elasticity_recovers_a_known_slope_with_its_interval() -> None:
    rng = random.Random(7)
    loop = [20 * math.exp(rng.uniform(-0.4, 0.4)) for _ in range(12)]
    follows = [0.2 * x ** 0.9 * math.exp(rng.gauss(0, 0.02)) for x in loop]  # eager-like: elasticity 0.9
    flat = [0.7 * math.exp(rng.gauss(0, 0.002)) for _ in loop]  # graph-replay-like: none
    e, g = stats.sensitivity(loop, follows), stats.sensitivity(loop, flat)
    assert e is not None and g is not None and e.interval is not None and g.interval is not None
    assert e.interval.contains(0.9) and abs(e.value - 0.9) < 0.05
    assert g.interval.contains(0.0) or abs(g.value) < 0.02
    assert stats.follows(e.interval) is True and stats.follows(g.interval) is False


def test_too_few_rounds_or_a_still_host_give_no_sensitivity() -> None:
    assert stats.sensitivity([1.0, 2.0], [1.0, 2.0]) is None
    assert stats.sensitivity([5.0, 5.0, 5.0], [1.0, 2.0, 3.0]) is None
    assert stats.follows(None) is None and stats.follows(Interval(0.3, 0.7)) is None


def test_on_the_h200_rounds_eager_follows_the_host_and_graph_replay_does_not() -> None:
    h = _h200()
    eager, graph = stats.sensitivity(h["loop"], h["eager"]), stats.sensitivity(h["loop"], h["graph"])
    assert eager is not None and graph is not None and eager.interval is not None and graph.interval is not None
    assert 0.8 < eager.interval.low < eager.value < eager.interval.high < 1.0
    assert graph.interval.high < 0.01
    assert eager.interval.low > 50 * graph.interval.high
    assert stats.follows(eager.interval) is True and stats.follows(graph.interval) is False
    assert stats.spread_ratio(h["loop"]) == pytest.approx(1.87, abs=0.01)  # the host moved about 1.9x (p5-p95)


def test_on_the_h200_rounds_eager_at_the_reference_speed_is_its_fast_host_step() -> None:
    h = _h200()
    ref = stats.reference_index(h["loop"])
    assert ref is not None and ref == sorted(h["loop"])[37]  # the 10th percentile by nearest rank: the 38th of 371
    eager = stats.at_reference(h["loop"], h["eager"], ref)
    assert eager is not None and eager.interval is not None
    observed = statistics.median(h["eager"])
    assert eager.interval.high < observed  # a faster host than the run's median
    assert eager.interval.low > min(h["eager"])  # but one the host actually ran at
    speedup = stats.speedup_at_reference((h["loop"], h["eager"]), (h["loop"], h["graph"]), ref)
    assert speedup is not None and speedup.interval is not None
    assert speedup.interval.high < statistics.median(h["eager"]) / statistics.median(h["graph"])


def test_the_in_run_verdict_is_clean_within_5_percent_or_when_its_interval_holds_1() -> None:
    assert stats.in_run_clean(1.04, None)
    assert stats.in_run_clean(1.12, Interval(0.97, 1.25))
    assert not stats.in_run_clean(1.12, Interval(1.06, 1.18))
    assert not stats.in_run_clean(0.572, None)


def test_timing_step_methods_records_the_index_beside_each_methods_rounds(tiny) -> None:
    """model_scaling's eager on the tiny model, 4 rounds on the CPU: per method the index of each round (beside its
    step samples), the sensitivity and the step at the reference with their intervals (or null), the cost, the raw
    samples in the note."""
    from types import SimpleNamespace

    import torch

    from lab.contract import metrics as M
    from lab.contract import notes as N
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID
    from lab.contract.results import Record
    from lab.experiments.common import methods
    from lab.run.context import Context

    _, w = tiny
    ctx = Context(BY_ID["model_scaling"], profiles.get("smoke"), None, Record("model_scaling", "", "OK"),
                  SimpleNamespace(experiments=[]), None)
    shape = methods.Shape(1, "float32", 4, 3, 16, {"size": "tiny", "dtype": "float32", "batch": 1})
    ms = methods.build(ctx, w, ("eager",), torch.zeros(1, 4, dtype=torch.long), shape, warmup=0, dynamic=None)
    methods.time(ctx, ms, rounds=4)
    rec = ctx.record
    params = {"size": "tiny", "dtype": "float32", "batch": 1}
    index = rec.metric(M.HOST_INDEX_MS.name, **params, method="eager").value
    assert len(index) == 4 and all(x > 0 for x in index)
    cost = rec.metric(M.HOST_INDEX_COST.name, **params).value
    assert cost is not None and cost > 0
    assert rec.metric(M.HOST_INDEX_REFERENCE_MS.name, **params).value == min(index)  # p10 of 4 rounds: the fastest
    for name in ("host_sensitivity", "host_sensitivity_ci_low", "host_sensitivity_ci_high", "step_ms_at_reference"):
        rec.metric(name, **params, method="eager")  # recorded (a value, or null where the index did not move)
    note = rec.notes[N.HOST_INDEX.key_for(shape="tiny.float32.b1")]
    assert N.check("model_scaling", N.HOST_INDEX.key_for(shape="tiny.float32.b1"), note) is None
    assert [len(pair) for pair in note["turns"]["eager|False"]] == [2, 2, 2, 2]


def test_the_step_at_the_reference_never_extrapolates_beyond_proportional() -> None:
    """Three rounds whose slope is noise (9: the step tripled while the index moved 13%) are put at the reference
    as if the step were all host work (elasticity 1), never further; a negative slope as if it did not care (0)."""
    index, steep = [0.8, 0.85, 0.9], [0.1, 0.2, 0.3]
    noise = stats.fit(index, steep)
    assert noise is not None and noise.slope > 8
    at = stats.at_reference(index, steep, 0.8)
    centre = math.exp(statistics.fmean(math.log(y) for y in steep))
    scale = 0.8 / math.exp(statistics.fmean(math.log(x) for x in index))
    assert at is not None and at.value == pytest.approx(centre * scale)
    assert at.interval is not None and at.interval.low >= 0.1 * 0.8 / 0.9 - 1e-9
    falling = stats.at_reference(index, list(reversed(steep)), 0.8)
    assert falling is not None and falling.value == pytest.approx(centre)


def test_turns_short_against_the_loop_share_samples_so_the_index_costs_at_most_its_share() -> None:
    """Turns of 1 ms against a loop of 1 ms (the smoke profile's tiny model) would cost 100%: a sample is taken once
    the turns since the last one reach 40 loops; each turn of the group gets the samples on either side of it."""
    clock = _Clock()
    index = HostIndex(now=clock.now, work=lambda: clock.advance(0.001))
    out = rotating_rounds({"a": lambda: (clock.advance(0.001), [1.0])[1], "b": lambda: (clock.advance(0.001), [2.0])[1]},
                          rounds=50, index=index)
    assert len(out["a"]) == len(out["b"]) == 50 and {k: len(v) for k, v in index.turns.items()} == {"a": 50, "b": 50}
    assert index.index_s == pytest.approx(0.001 * 4)  # the first sample, one after each 40 turns, one at the end
    assert index.cost() == pytest.approx(0.04) and index.cost() <= index.max_cost
    assert index.per_round("a") == pytest.approx([1.0] * 50)


def test_a_paired_turn_takes_its_own_samples_whatever_its_length() -> None:
    clock = _Clock()
    loops = iter([0.001, 0.002, 0.003, 0.004])
    index = HostIndex(now=clock.now, work=lambda: clock.advance(next(loops)))
    index.turn("short", lambda: clock.advance(0.0001))  # waits for a sample after it
    index.turn("paired", lambda: clock.advance(0.0001), share=False)
    assert index.turns == {"short": [pytest.approx((1.0, 2.0))], "paired": [pytest.approx((2.0, 3.0))]}
