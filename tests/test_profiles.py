"""lab/contract/profiles.py: the profiles' plans."""

from __future__ import annotations

from lab.contract.names import Method
from lab.step.methods import METHODS
from lab.contract import catalogue, profiles
from lab.run import runner

SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")


def test_gpu_profiles_plan_every_method() -> None:
    from lab.contract import catalogue, profiles
    from lab.run.context import options_for
    from lab.experiments.cuda_graph_decode import COSTLY

    spec = catalogue.BY_ID["cuda_graph_decode"]
    gpu = options_for(spec, profiles.get("gpu"))
    full = options_for(spec, profiles.get("gpu-full"))
    assert gpu.dynamic is False and full.dynamic is None  # the two runs side by side: what dynamic=False changes
    assert not set(COSTLY) & set(gpu.methods) and not gpu.max_autotune
    assert {Method.FUSED, Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH} <= set(gpu.methods)
    # Inductor's levers on compile+graph are gpu-full's (the gpu profile's 5 minutes, 2026-12-02)
    assert not {Method.COMPILE_GRAPH_COMBO, Method.COMPILE_GRAPH_PDL} & set(gpu.methods)
    assert {Method.COMPILE_GRAPH_COMBO, Method.COMPILE_GRAPH_PDL} <= set(full.methods)
    # gpu-full plans every method: the tuned compiles in compile_tuning, at every batch and in bf16 (issue 33: with them
    # at batch 1 cuda_graph_decode took 444 s on an H200, most of a 10-minute command), the others in cuda_graph_decode
    from lab.experiments.cuda_graph_decode import TUNED_METHODS

    tuning = options_for(catalogue.BY_ID["compile_tuning"], profiles.get("gpu-full"))
    assert "compile_tuning" in profiles.get("gpu-full").experiments and catalogue.BY_ID["compile_tuning"].by_name
    assert not set(TUNED_METHODS) & set(full.methods) and not full.max_autotune
    assert set(full.methods) | set(TUNED_METHODS) == set(METHODS)
    assert tuning.max_autotune and tuning.sweep_methods is None and tuning.batches == (1, 8, 16, 64)
    assert set(tuning.methods) | {Method.MAX_AUTOTUNE, Method.MAX_AUTOTUNE_GRAPH} >= set(TUNED_METHODS)
    assert set(TUNED_METHODS) <= set(tuning.bf16_methods) and Method.COMPILE_GRAPH in tuning.methods
    assert "compile_tuning" not in {s.id for s in catalogue.resolve(None, sweeps=False)}  # never in the gpu profile
    assert set(gpu.sweep_methods) <= set(gpu.methods) and Method.EAGER in gpu.sweep_methods
    cost = options_for(catalogue.BY_ID["compile_cost"], profiles.get("gpu"))
    cost_full = options_for(catalogue.BY_ID["compile_cost"], profiles.get("gpu-full"))
    assert cost.depths == (12,) and cost_full.depths == (2, 12) and cost_full.mlp_trials >= 1


def test_sweeps_are_catalogued_and_only_sweep_profiles_run_them_by_default() -> None:
    assert tuple(s.id for s in catalogue.CATALOGUE if s.sweep) == SWEEPS == profiles.SWEEPS
    assert not {s.id for s in catalogue.resolve(None, sweeps=False)} & set(SWEEPS)
    assert {s.id for s in catalogue.resolve(None, sweeps=True)} >= set(SWEEPS)
    sweep = profiles.get("gpu-sweep")
    assert sweep.device == "cuda" and sweep.experiments == ("sentinel", *SWEEPS, "sentinel_end")
    assert profiles.get("smoke").sweeps and not profiles.get("gpu").sweeps and not profiles.get("cpu").sweeps
    opts = runner.resolve_all(catalogue.resolve(list(SWEEPS)), sweep)
    assert opts["model_scaling"].sizes == ("gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B")
    assert opts["context_scaling"].max_lens[-1] == 2048 and opts["graph_buckets"].max_batch == 64
    assert Method.EAGER in opts["model_scaling"].methods and Method.COMPILE_GRAPH in opts["model_scaling"].methods
