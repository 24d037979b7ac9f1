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


# ---------------------------------------------------------------------------- derived metrics' conditions

def test_every_source_is_declared_and_its_conditions_are_inherited() -> None:
    derived = [s for s in M.REGISTRY.values() if s.derived_from]
    assert {"mbu", "speedup_vs_eager", "measured_over_bound", "saving_ms_per_step", "break_even_steps", "winner",
            "margin_vs_runner_up", "tie_with_eager"} <= {s.name for s in derived}
    for spec in derived:
        for source in spec.derived_from:
            assert source in M.REGISTRY, (spec.name, source)
            assert set(M.conditions(M.REGISTRY[source])) <= set(M.conditions(spec)), (spec.name, source)
    assert "option:amdahl.decode_layers" in M.conditions(M.MBU)  # through step_ms
    assert "manifest:compile_cache.state" in M.conditions(M.BREAK_EVEN_STEPS)


def _about(manifest: dict, value: float, experiment: str, **params) -> Value:
    return Value(value, "x", params, manifest=manifest, experiment=experiment)


def test_selection_and_amdahl_judge_the_same_figure_alike() -> None:
    a = MANIFEST | {"options": {"amdahl": {"decode_layers": 2}}}
    b = MANIFEST | {"options": {"amdahl": {"decode_layers": 12}}}
    amdahl = judge(M.MEASURED_SPEEDUP, _about(a, 1.2, "amdahl", workload="gpt2"), _about(b, 1.5, "amdahl", workload="gpt2"))
    chosen = judge(M.SPEEDUP_VS_EAGER, _about(a, 1.2, "selection", workload="amdahl", case="-"),
                   _about(b, 1.5, "selection", workload="amdahl", case="-"))
    assert amdahl.mark == chosen.mark == "not comparable"
    assert chosen.reason == "option amdahl.decode_layers differs: 2 vs 12"
    same = MANIFEST | {"options": {"amdahl": {"decode_layers": 12}}}
    assert judge(M.SPEEDUP_VS_EAGER, _about(same, 1.2, "selection", workload="amdahl"),
                 _about(same, 1.5, "selection", workload="amdahl")).mark == "better"


def test_a_saving_is_not_comparable_where_its_step_times_moved_other_bytes() -> None:
    from lab.contract.results import Metric

    def side(nbytes: int, saving: float) -> Value:
        p = {"method": "fused", "n_ops": 4}
        return Value(saving, "ms", p, siblings=(Metric("bytes_moved", nbytes, "B", p),), manifest=MANIFEST,
                     experiment="fusion")

    verdict = judge(M.SAVING_MS_PER_STEP, side(1 << 27, 0.5), side(1 << 31, 20.0))
    assert (verdict.mark, verdict.reason) == ("not comparable", f"bytes_moved differs: {1 << 27} vs {1 << 31}")
    assert judge(M.SAVING_MS_PER_STEP, side(1 << 27, 0.5), side(1 << 27, 20.0)).mark == "better"


def test_a_gemm_step_at_another_batch_is_not_comparable() -> None:
    a = MANIFEST | {"options": {"gemm_bound": {"batch": 256}}}
    b = MANIFEST | {"options": {"gemm_bound": {"batch": 8192}}}
    step = judge(M.STEP_MS, Value(1.0, "ms", {"method": "eager"}, manifest=a, experiment="gemm_bound"),
                 Value(30.0, "ms", {"method": "eager"}, manifest=b, experiment="gemm_bound"))
    assert (step.mark, step.reason) == ("not comparable", "option gemm_bound.batch differs: 256 vs 8192")
