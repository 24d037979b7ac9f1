"""The hand-fused step (lab.step.fused) against the eager step it reproduces.

CPU: the Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1, numpy on the host), in
one subprocess so that the variable is set before Triton is imported and no other test sees it;
every check below reads its part of that run. Skipped, with the import error, without Triton.
CUDA (`cuda` marker): GPT-2 124M-shaped random weights at batches 1, 8, 16, 64; the step captured
in a CUDA graph and replayed; bf16 teacher-forced; programmatic dependent launch on Hopper, with and
without the PREFETCH kernels (`fused-pdl-prefetch`), which the interpreter also runs (without PDL)
and the ahead-of-time compile checks for what is left after the PDL wait.

Tolerances, and why:
- fp32 logits and cache within 1e-5 of their largest magnitude (tiny and odd models, CPU). The fused
  step sums in another order (row blocks, K chunks, attention splits): each dot product of K <= 256
  terms then differs by about sqrt(K) * 2^-24 relative; the runs show ~5e-7, so 1e-5 is a 20x margin
  and still 400x below one bf16 rounding. GPT-2 124M on the GPU: 1e-4 (K up to 3072, 12 layers).
- bf16: each logit within 5% of the fp32 reference's largest logit (tiny model), and no worse than
  1.5x the eager bf16 step's own error (both models). bf16 keeps 8 significant bits (rounding
  2^-9 = 0.2% relative) in the weights, the cache and the returned logits; over the layers that is
  ~1-3% of the logits' scale for both steps (the fused step keeps its activations in fp32, eager
  rounds them to bf16).
Tokens, `out`, `tok` and `pos` must be equal, always.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.step.fused import configs as C, triton_import_error
from lab.contract.profiles import GPT2

ROOT = Path(__file__).resolve().parents[1]
TRITON_MISSING = triton_import_error()
needs_triton = pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
FP32_REL_CPU, FP32_REL_GPU = 1e-5, 1e-4
BF16_REL, BF16_VS_EAGER = 0.05, 1.5
# Non-default configs for the odd model: batch blocks that are partly masked (BB 2 of 3 rows), K in
# several chunks whose last is partial (48 = 32 + 16, 192 = 128 + 64), attention in splits of 8
# slots (with a 4-token prompt and a 14-slot cache the second split is never reached: it must weigh
# nothing), several lm_head blocks for the argmax.
ODD_CONFIGS = {"attention": {"BS": 8}, "ln_qkv": {"BB": 2, "BN": 16, "BK": 32},
               "fc2": {"BB": 2, "BN": 16, "BK": 128}, "lm_head": {"BB": 1, "BN": 32, "BK": 32}}

SCRIPT = r"""
import json, sys
import torch
from lab.step.decode import new_state
from lab.step.fused import check as K, tune as T
from lab.step.fused.step import prepare

odd_configs = json.loads(sys.argv[1])
tiny = K.weights_for("tiny")
out = {"fp32": [K.free_running(tiny, b, steps=3, sms=2) for b in (1, 3)],
       "odd": K.free_running(K.weights_for("odd"), 3, steps=2, prompt_len=4, sms=4,
                             overrides=K.parse_configs(sys.argv[1])),
       "bf16": K.teacher_forced(tiny, K.weights_for("tiny", dtype=torch.bfloat16), 2, steps=3, sms=2),
       # the PREFETCH kernels (fused-pdl-prefetch without the PDL launch, which needs a Hopper GPU)
       "prefetch": [K.free_running(tiny, 1, steps=3, sms=2, prefetch=True),
                    K.free_running(K.weights_for("odd"), 3, steps=2, prompt_len=4, sms=4, prefetch=True)],
       "prefetch_bf16": K.teacher_forced(tiny, K.weights_for("tiny", dtype=torch.bfloat16), 1, steps=3, sms=2,
                                         prefetch=True)}
try:
    prepare(new_state(tiny, 1, 16), tiny, pdl=True)
    out["pdl_refusal"] = None
except ValueError as exc:
    out["pdl_refusal"] = str(exc)
# fused_step(state, weights): one plan per state, made on first use and dropped with the state.
import gc
from lab.step import decode as D
from lab.step.fused import configs as C, step as S
C.DEFAULT_SMS = 2  # no device here: small grids for the interpreter
state = new_state(tiny, 1, 12)
D.prefill(state, tiny, K.prompt_for(1, 4, 512))
S.fused_step(state, tiny)
plan = S.plan_for(state, tiny)
S.fused_step(state, tiny)
reused = S.plan_for(state, tiny) is plan and int(state.pos.item()) == 6 and plan.sms == 2
try:
    S.fused_step(new_state(tiny, 1, 12), plan)
    wrong_state = None
except ValueError as exc:
    wrong_state = str(exc)
key = (id(state), False)
del state, plan
gc.collect()
out["plans"] = {"reused": reused, "wrong_state": wrong_state, "dropped": key not in S._PLANS}
# The tuner's search with a fake clock that prefers proj BN=16, BK=64, 2 warps (no kernel runs).
def fake(plan, rep_ms):
    cfg = plan.configs["proj"]
    return 1.0 + abs(cfg.BN - 16) + abs(cfg.BK - 64) / 64 + 0.01 * cfg.num_warps
lines = []
best, tried = T.tune(tiny, 1, 8, 1, float("inf"), lines.append, timer=fake, max_len=64)
out["tune"] = {"proj": best["proj"].__dict__, "tried": len(tried["proj"]), "kernels": sorted(tried), "log": lines}
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """One interpreter run of every CPU check (about a minute on 2 cores)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(ODD_CONFIGS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _assert_equal_run(run: dict, rel: float, n_layer: int = 2) -> None:
    assert run["kernels_per_step"] == 5 * n_layer + 2
    for i, step in enumerate(run["per_step"]):
        where = f"batch {run['batch']}, step {i}: {step}"
        assert step["tokens_equal"] and step["out_equal"] and step["pos_equal"], where
        assert step["argmax_of_own_logits"], where
        assert step["logit_diff"] <= rel * step["logit_scale"], where
        assert step["cache_diff"] <= rel * step["cache_scale"], where


@needs_triton
@pytest.mark.parametrize("index", [0, 1], ids=["batch1", "batch3"])
def test_fp32_equals_eager_in_the_interpreter(interpreted: dict, index: int) -> None:
    run = interpreted["fp32"][index]
    assert run["batch"] == (1, 3)[index] and len(run["per_step"]) == 3
    _assert_equal_run(run, FP32_REL_CPU)


@needs_triton
def test_every_mask_path_on_odd_shapes(interpreted: dict) -> None:
    run = interpreted["odd"]
    assert run["configs"]["attention"]["BS"] == 8 and run["configs"]["ln_qkv"]["BB"] == 2
    _assert_equal_run(run, FP32_REL_CPU)


@needs_triton
def test_bf16_teacher_forced_within_bf16_rounding(interpreted: dict) -> None:
    r = interpreted["bf16"]
    assert r["dtype"] == "bfloat16" and len(r["fused_err"]) == 3
    assert all(r["bookkeeping_ok"]), r
    for err, scale in zip(r["fused_err"], r["scale"]):
        assert err <= BF16_REL * scale, r
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r


@needs_triton
@pytest.mark.parametrize("index", [0, 1], ids=["tiny-batch1", "odd-batch3"])
def test_prefetch_kernels_equal_eager_in_the_interpreter(interpreted: dict, index: int) -> None:
    run = interpreted["prefetch"][index]
    for name in C.PREFETCH_KERNELS:  # the variant computes its rows in one chunk
        cfg = run["configs"][name]
        assert cfg["BK"] == C.next_pow2(C.gemv_shapes(48 if index else 64, 500 if index else 512)[name][1]), cfg
    _assert_equal_run(run, FP32_REL_CPU)


@needs_triton
def test_prefetch_bf16_teacher_forced(interpreted: dict) -> None:
    r = interpreted["prefetch_bf16"]
    assert all(r["bookkeeping_ok"]), r
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r


@needs_triton
def test_pdl_is_refused_without_hopper(interpreted: dict) -> None:
    assert interpreted["pdl_refusal"] and "CUDA device" in interpreted["pdl_refusal"]


@needs_triton
def test_fused_step_keeps_one_plan_per_state(interpreted: dict) -> None:
    p = interpreted["plans"]
    assert p["reused"] and p["dropped"], p
    assert p["wrong_state"] and "another DecodeState" in p["wrong_state"]


@needs_triton
def test_tuner_search_picks_the_fastest_candidate(interpreted: dict) -> None:
    t = interpreted["tune"]
    assert (t["proj"]["BN"], t["proj"]["BK"], t["proj"]["num_warps"]) == (16, 64, 2), t
    assert t["tried"] > 3 and t["kernels"] == sorted(C.KERNEL_NAMES)


AOT_SCRIPT = r"""
import json, sys, torch
from dataclasses import asdict
from lab.step.fused.aot import compile_plan, plan_for_shapes
out = {}
for label, dtype, batch, pdl, prefetch in (("fp32-b1-pdl", torch.float32, 1, True, False),
                                           ("bf16-b3", torch.bfloat16, 3, False, False),
                                           ("bf16-b1-pdl-prefetch", torch.bfloat16, 1, True, True)):
    plan = plan_for_shapes("gpt2", dtype, batch, pdl=pdl, prefetch=prefetch)
    out[label] = [asdict(c) for c in compile_plan(plan)]
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def compiled_for_hopper() -> dict:
    """Every kernel compiled for sm_90 by Triton and its bundled ptxas (no GPU, no interpreter)."""
    from lab.step.fused.aot import ptxas_path

    if ptxas_path() is None:
        pytest.skip("the installed Triton has no bundled ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", AOT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@needs_triton
@pytest.mark.parametrize("label", ["fp32-b1-pdl", "bf16-b3", "bf16-b1-pdl-prefetch"])
def test_kernels_compile_for_hopper(compiled_for_hopper: dict, label: str) -> None:
    kernels = compiled_for_hopper[label]
    assert sorted({k["name"] for k in kernels}) == sorted(C.KERNEL_NAMES) and len(kernels) == 8
    for k in kernels:
        assert k["registers"] is not None and k["registers"] <= 255 and k["spill_bytes"] == 0, k
        assert k["tensor_core_ops"] == 0, k  # plain fp32 FMA: no tf32, no mma
        assert k["grid_dependency_ops"] == (2 if "pdl" in label else 0), k
        if k["name"] != "argmax":
            assert k["vector_loads"] > 0, k  # 16-byte loads of the weights / cache


def test_prefetch_leaves_only_activations_after_the_wait(compiled_for_hopper: dict) -> None:
    """What the variant is for: layer norm + FC reads its slice, bias and norm parameters before the PDL
    wait, so after it only the residual row is loaded (from L2); the default build loads weights there."""
    after = {(k["name"], k["variant"]): k["loads_after_wait"] for k in compiled_for_hopper["bf16-b1-pdl-prefetch"]}
    default = {(k["name"], k["variant"]): k["loads_after_wait"] for k in compiled_for_hopper["fp32-b1-pdl"]}
    assert after[("ln_fc", "")] <= 2 < default[("ln_fc", "")], (after, default)
    assert after[("ln_qkv", "")] <= 4 < default[("ln_qkv", "")], (after, default)


# ------------------------------------------------------------------ configs and budget (no Triton)

def test_prefetch_configs_are_one_chunk_within_the_tile_budget(monkeypatch) -> None:
    shapes = C.gemv_shapes(GPT2.n_embd, GPT2.vocab_size)
    for dtype in (torch.float32, torch.bfloat16):
        for batch in (1, 8, 64):
            plain = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, batch, dtype, 132)
            cfg = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, batch, dtype, 132, prefetch=True)
            assert cfg["lm_head"] == plain["lm_head"] and cfg["attention"] == plain["attention"]
            for name in C.PREFETCH_KERNELS:
                g = cfg[name]
                assert g.BK == C.next_pow2(shapes[name][1]), (name, g)
                assert g.BB * g.BN * g.BK <= C.PREFETCH_TILE * 32 * g.num_warps, (name, g)
    one = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)
    assert one["ln_fc"] == C.GemvConfig(1, 8, 1024, 8)  # the tuned BN and warps, BK widened to the row
    with pytest.raises(ValueError, match="one chunk"):
        C.choose(64, 4, 512, 64, 1, torch.float32, 8, overrides={"fc2": C.GemvConfig(1, 4, 64)}, prefetch=True)
    monkeypatch.setitem(C.TUNED_PREFETCH, ("fc2", "bfloat16", 1), {"BB": 1, "BN": 2, "BK": 1024, "num_warps": 4})
    with pytest.raises(ValueError, match=r"TUNED_PREFETCH\['fc2', 'bfloat16', 1\]: BK must be 4096"):
        C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)


def test_default_grids_cover_every_sm_at_batch_1() -> None:
    cfg = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.float32, 132, tuned={})
    for name, (N, _) in C.gemv_shapes(GPT2.n_embd, GPT2.vocab_size).items():
        assert C.cdiv(N, cfg[name].BN) >= 132, (name, cfg[name])
    assert C.cdiv(256, cfg["attention"].BS) == C.MAX_SPLITS  # batch 1: 12 heads are too few programs alone
    with pytest.raises(ValueError, match="powers of two"):
        C.choose(64, 4, 512, 64, 1, torch.float32, 8, overrides={"fc2": C.GemvConfig(1, 3, 64)})


def test_byte_budget_counts_each_weight_once(tiny) -> None:
    _, w = tiny
    E, V, B = w.n_embd, int(w.wte.shape[0]), 3
    rows = C.byte_budget(w.n_layer, E, w.n_head, V, B, 4, reached_slots=10, n_splits=4, lm_blocks=8)
    # every tensor once, wpe but one row, plus the B embedding rows the first kernel gathers
    expected = w.nbytes() - w.wpe.numel() * 4 + E * 4 + B * E * 4
    assert sum(r.weights for r in rows) == expected
    assert sum(r.launches for r in rows) == 5 * w.n_layer + 2
    assert sum(r.cache for r in rows) == w.n_layer * 2 * B * E * 4 * (10 + 1)  # read 10 slots, write 1


def test_budget_matches_the_step_docstring() -> None:
    from pathlib import Path as P

    rows = C.byte_budget(12, 768, 12, 50257, 1, 4, 256, 8, 786)
    s = C.budget_summary(rows, 4208.0)
    doc = (P(__file__).resolve().parents[1] / "lab" / "step" / "fused" / "step.py").read_text()
    assert s["kernels"] == 62 and "62 launches" in doc
    assert f"{s['weight_bytes'] / 1e6:.1f} MB" in doc and f"{s['weight_floor_ms']:.3f} ms" in doc


# ------------------------------------------------------------------ CUDA

@pytest.fixture(scope="module")
def gpt2_cuda():
    from lab.step.fused.check import weights_for

    return weights_for("gpt2", "cuda", torch.float32)


@pytest.fixture(scope="module")
def gpt2_cuda_bf16():
    from lab.step.fused.check import weights_for

    return weights_for("gpt2", "cuda", torch.bfloat16)


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch", [1, 8, 16, 64])
def test_gpu_fp32_equals_eager_and_replays(gpt2_cuda, batch: int) -> None:
    from lab.step.fused.check import free_running

    run = free_running(gpt2_cuda, batch, steps=12, prompt_len=16, graph=True)
    _assert_equal_run(run, FP32_REL_GPU, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,prefetch", [(1, False), (8, False), (1, True)], ids=["b1", "b8", "b1-prefetch"])
def test_gpu_pdl_equals_eager_and_replays(gpt2_cuda, batch: int, prefetch: bool) -> None:
    from lab.step.fused.check import free_running
    from lab.step.fused.step import pdl_supported

    ok, why = pdl_supported(torch.device("cuda"))
    if not ok:
        pytest.skip(why)
    run = free_running(gpt2_cuda, batch, steps=12, prompt_len=16, graph=True, pdl=True, prefetch=prefetch)
    _assert_equal_run(run, FP32_REL_GPU, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,prefetch", [(1, False), (8, False), (1, True)], ids=["b1", "b8", "b1-prefetch"])
def test_gpu_bf16_teacher_forced(gpt2_cuda, gpt2_cuda_bf16, batch: int, prefetch: bool) -> None:
    from lab.step.fused.check import teacher_forced

    r = teacher_forced(gpt2_cuda, gpt2_cuda_bf16, batch, steps=12, prompt_len=16, prefetch=prefetch)
    assert all(r["bookkeeping_ok"]), r
    # 12 layers of bf16 weights: the absolute error is whatever bf16 gives; the fused step must not add to it
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r
