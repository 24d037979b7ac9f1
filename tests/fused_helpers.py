"""What the fused step's tests assert of a free-running run (lab.step.fused.check.free_running), on the CPU in
Triton's interpreter (tests/test_fused_interpreter.py) and on a GPU (tests/test_fused.py)."""

from __future__ import annotations


def launches_per_step(run: dict, n_layer: int) -> int:
    """The launches a step of the run's plan makes: 9 a layer + 4 on the library-GEMM path, 5 a layer + 2 on GEMV, 4 a
    layer + 2 with the attention folded into ln_qkv, one fewer with the argmax folded into lm_head."""
    if run.get("path") == "gemm":
        return 9 * n_layer + 4
    return (4 if run.get("fold") else 5) * n_layer + 2 - bool(run.get("argmax_fold"))


def assert_equal_run(run: dict, rel: float, n_layer: int = 2, launches: int | None = None) -> None:
    """Every step's tokens, cache row, position and own argmax as eager's; logits and cache within `rel`; the launches
    per step the run's plan makes (`launches_per_step`, over the run's layers where it says, else `n_layer`), or
    `launches` where given (the persistent plan: one a layer + 2)."""
    if launches is None:
        launches = launches_per_step(run, run.get("n_layer", n_layer))
    assert run["kernels_per_step"] == launches, run
    for i, step in enumerate(run["per_step"]):
        where = f"{run.get('path')} batch {run['batch']}, step {i}: {step}"
        assert step["tokens_equal"] and step["out_equal"] and step["pos_equal"], where
        assert step["argmax_of_own_logits"], where
        assert step["logit_diff"] <= rel * step["logit_scale"], where
        assert step["cache_diff"] <= rel * step["cache_scale"], where
