"""The hand-fused step (lab.step.fused): its configs, its projection-path rule, its plans, its AOT compile, CUDA.

No kernel runs here on the CPU: the Triton-interpreter runs against the eager step are in
tests/test_fused_interpreter.py (one worker process with the interpreter on, one test per case).
Here: the configs and the byte budget (no Triton); plans prepared without running a kernel (the
rule's path at each batch, prefetch declined where it would re-read, a built method's `path`, the
tuner's search with a fake clock); every Triton kernel of both paths compiled ahead of time for
sm_90 (registers, no spills, no tensor-core instruction, PDL's griddepcontrol); and (`cuda` marker)
GPT-2 124M-shaped random weights at batches 1, 8, 16, 64 (the gemv path at 1, the gemm path from 8),
captured in a CUDA graph and replayed, bf16 teacher-forced, programmatic dependent launch on Hopper
with and without the PREFETCH kernels.

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

import os
from dataclasses import replace
from typing import Any

import pytest
import torch

from fused_helpers import assert_equal_run
from lab.step.fused import configs as C, triton_import_error
from lab.contract.profiles import GPT2

TRITON_MISSING = triton_import_error()
needs_triton = pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
FP32_REL_GPU, BF16_VS_EAGER = 1e-4, 1.5  # CPU tolerances: tests/test_fused_interpreter.py


# ------------------------------------------------------------------ plans without running a kernel (no interpreter)

@pytest.fixture(scope="module")
def tiny_fp32():
    from lab.step.fused.check import weights_for

    return weights_for("tiny")


@needs_triton
def test_the_attention_folds_into_ln_qkv_where_asked_and_its_tiles_allow(tiny_fp32) -> None:
    """fold=True: no attention launch, ln_qkv with FOLD and a chunk of the cache, proj reading att (FOLDED), the heads'
    counters zeroed; refused, with the reason, where ln_qkv's BN does not divide the head's width (16 here) and on
    the gemm path; the default folds only with PDL (FOLD_WITH_PDL), which this host cannot run (aot.plan_for_shapes
    builds those plans: tests below)."""
    from lab.step.decode import new_state
    from lab.step.fused.step import FOLD_WITH_PDL, folds, prepare

    w = tiny_fp32
    folded = prepare(new_state(w, 3, 24), w, fold=True, overrides={"ln_qkv": C.GemvConfig(2, 8, 64)})
    assert folded.fold and [x.name for x in folded.launches[:4]] == ["ln_qkv", "proj", "ln_fc", "fc2"]
    assert len(folded.launches) == 4 * w.n_layer + 2
    qkv, proj = folded.launches[0], folded.launches[1]
    assert (qkv.meta["FOLD"], qkv.meta["BS"], qkv.meta["BD"]) == (True, 32, 16) and proj.meta["FOLDED"]
    assert qkv.meta["HEAD_MAJOR"] is False  # the q-K-V order at this width (configs.HEAD_MAJOR: measured shapes only)
    assert proj.args[0] is folded.workspace.att and tuple(folded.workspace.att.shape) == (3, 64)
    heads = folded.workspace.heads
    # two sets of counters: the heads' and, for OLDER_FIRST, their q programs'
    assert heads is not None and heads.dtype == torch.int32 and heads.numel() == 2 * 2 * 4 and not heads.any()
    wide = prepare(new_state(w, 1, 24), w, fold=True, overrides={"ln_qkv": C.GemvConfig(1, 32, 64)})
    assert not wide.fold and "attention" in [x.name for x in wide.launches]
    assert not wide.launches[0].meta.get("HEAD_MAJOR")
    assert "not folded into ln_qkv: ln_qkv's BN 32 does not divide the head's width 16" in wide.path_reason
    gemm = prepare(new_state(w, 1, 24), w, fold=True, path="gemm")
    assert not gemm.fold and "folded" not in gemm.path_reason
    assert not prepare(new_state(w, 1, 24), w).fold and FOLD_WITH_PDL  # no PDL here: five kernels a layer
    assert folds(None, pdl=True) and not folds(None, pdl=False)  # the default: fold with PDL
    assert folds(True, pdl=False) and not folds(False, pdl=True)  # asked for or refused, either way


@needs_triton
def test_the_argmax_folds_into_lm_head_where_asked_or_its_table_binds_it(tiny_fp32, monkeypatch) -> None:
    """argmax_fold=True: no argmax launch, lm_head with ARGMAX_FOLD, the step's tokens, out and position as its
    arguments, the argmax's rows a pass and the candidates' padded width, its counter zeroed; None takes
    configs.ARGMAX_FOLD (no shape bound: the plans are as they were) and False leaves it a launch where the table binds
    it; the gemm path never folds it and refuses it asked for; the persistent plan keeps its own argmax launch."""
    from lab.step.decode import new_state
    from lab.step.fused import persistent as PS
    from lab.step.fused.step import prepare

    w = tiny_fp32
    state = new_state(w, 3, 24)
    am = C.ArgmaxConfig(2, 1)
    plain = prepare(state, w, overrides={"argmax": am})
    folded = prepare(state, w, argmax_fold=True, overrides={"argmax": am})
    assert not plain.argmax_fold and folded.argmax_fold and C.ARGMAX_FOLD == set()
    assert [x.name for x in plain.launches] == [x.name for x in folded.launches] + ["argmax"]
    head = folded.launches[-1]
    assert head.name == "lm_head" and head.args[10:15] == (state.tok, state.out, state.pos, state.pos, state.max_len)
    nblk = plain.workspace.lm_val.shape[1]
    assert {k: head.meta[k] for k in ("ARGMAX_FOLD", "NB", "AB", "BP")} == {
        "ARGMAX_FOLD": True, "NB": 3, "AB": 2, "BP": C.next_pow2(nblk)}
    assert "ARGMAX_FOLD" not in plain.launches[-2].meta
    done = folded.workspace.lm_done
    assert head.args[15] is done and done is not None and done.dtype == torch.int32 and done.numel() == 1
    assert not done.any() and plain.workspace.lm_done is not None and plain.workspace.lm_done.numel() == 0
    repeatable = prepare(state, w, argmax_fold=True, repeatable=True)
    assert repeatable.launches[-1].args[13] is repeatable.workspace.pos_scratch  # the position is not advanced
    monkeypatch.setattr(C, "ARGMAX_FOLD", {("float32", w.n_embd)})
    assert prepare(state, w).argmax_fold and not prepare(state, w, argmax_fold=False).argmax_fold
    assert not prepare(state, w, path="gemm").argmax_fold
    with pytest.raises(ValueError, match="argmax folded into lm_head on the gemm path"):
        prepare(state, w, path="gemm", argmax_fold=True)
    persistent = PS.prepare(new_state(w, 1, 24), w, stepped=True)
    assert [x.name for x in persistent.launches[-2:]] == ["lm_head", "argmax"] and not persistent.argmax_fold


def test_the_folded_attentions_chunk_fits_the_tile_budget() -> None:
    assert C.fold_slots(256, 64, 4) == 128 and C.fold_slots(256, 64, 8) == 256  # K and V: 64 values a thread each
    assert C.fold_slots(256, 64, 2) == 64 and C.fold_slots(24, 64, 8) == 32  # no more than the cache holds
    assert C.fold_slots(256, 16, 1) == 128 and C.fold_slots(8, 12, 4) == 16  # at least 16
    assert C.fold_refusal(C.GemvConfig(1, 16, 1024), 64) == "" and C.fold_refusal(C.GemvConfig(1, 64, 1024), 64) == ""
    assert "BN 128 does not divide" in C.fold_refusal(C.GemvConfig(1, 128, 1024), 64)
    assert "not a GEMV config" in C.fold_refusal(C.AttentionConfig(64), 64)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_folded_layer_norm_constants_reproduce_layer_norm_then_the_projection(dtype: torch.dtype) -> None:
    """step.ln_folded's c1 = W g and c2 = W beta + bias, put back as the PREFETCH kernels use them (rstd ((x g) @ W.T -
    mean c1) + c2, projections._ln_gemv_one), give layer_norm(x) @ W.T + bias, on rows whose mean is several times
    their spread; fp32 vectors the length of W's rows."""
    import torch.nn.functional as F

    from lab.step.fused.step import ln_folded

    gen = torch.Generator().manual_seed(0)
    E, N = 48, 20
    weight, g, beta, bias = (torch.randn(*shape, generator=gen).to(dtype) for shape in ((N, E), (E,), (E,), (N,)))
    x = torch.randn(3, E, generator=gen, dtype=torch.float64) + 4.0
    c1, c2 = ln_folded(weight, g, beta, bias)
    assert c1.dtype == c2.dtype == torch.float32 and c1.shape == c2.shape == (N,)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    folded = (var + 1e-5).rsqrt() * ((x * g.double()) @ weight.double().T - mean * c1.double()) + c2.double()
    ref = F.linear(F.layer_norm(x, (E,), g.double(), beta.double(), 1e-5), weight.double(), bias.double())
    assert torch.allclose(folded, ref, rtol=0, atol=1e-5 * ref.abs().max().item()), (folded - ref).abs().max()


@needs_triton
@pytest.mark.parametrize("dtype, width, head_major", [(torch.float32, 768, False), (torch.bfloat16, 768, False),
                                                      (torch.float32, 1600, False), (torch.bfloat16, 1600, True)])
def test_the_folded_ln_qkv_runs_head_by_head_where_that_measured_faster(dtype: torch.dtype, width: int,
                                                                         head_major: bool) -> None:
    """configs.HEAD_MAJOR: GPT-2 1.5B in bf16 runs the folded ln_qkv's programs head by head (0.986x the step on the
    H200), the other shapes in the q-K-V order; a plan that does not fold binds no order."""
    from lab.contract.profiles import ModelSpec
    from lab.step.fused import aot

    spec = ModelSpec("one-layer", 1, width, width // 64, vocab_size=512)
    assert C.head_major(str(dtype), width) == head_major
    [qkv] = [x for x in aot.plan_for_shapes(spec, dtype, 1, pdl=True, prefetch=True).launches if x.name == "ln_qkv"]
    assert qkv.meta["FOLD"] and qkv.meta["HEAD_MAJOR"] == head_major
    [plain] = [x for x in aot.plan_for_shapes(spec, dtype, 1, fold=False).launches if x.name == "ln_qkv"]
    assert "HEAD_MAJOR" not in plain.meta


@needs_triton
@pytest.mark.parametrize("dtype, width, marked", [(torch.float32, 768, True), (torch.bfloat16, 768, True),
                                                  (torch.float32, 1600, False), (torch.bfloat16, 1600, True)])
def test_the_prefetch_plan_marks_its_weight_loads_to_leave_l2_first_where_that_measured_faster(
        dtype: torch.dtype, width: int, marked: bool) -> None:
    """configs.EVICT_FIRST: the PREFETCH kernels' slices and lm_head's tiles are loaded evict-first at GPT-2 124M (both
    dtypes) and 1.5B bf16, not at 1.5B fp32 (1.045x there); the other paths never; a marked build's PTX says so."""
    from dataclasses import replace

    from lab.contract.profiles import ModelSpec
    from lab.step.fused import aot

    spec = ModelSpec("one-layer", 1, width, width // 64, vocab_size=512)
    assert C.evict_first(str(dtype), width) == marked
    plan = aot.plan_for_shapes(spec, dtype, 1, pdl=True, prefetch=True)
    assert ({x.name: x.meta.get("EVICT", 0) for x in plan.launches if x.name in C.GEMV_KERNELS}
            == dict.fromkeys(C.GEMV_KERNELS, int(marked)))
    assert not any(x.meta.get("EVICT") for x in aot.plan_for_shapes(spec, dtype, 1, pdl=True).launches)
    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1" or width != 768:
        return  # (the PTX once: a compile of each dtype at one width)
    [fc2] = [x for x in plan.launches if x.name == "fc2"]
    ptx = {e: aot.compile_launch(replace(fc2, meta={**fc2.meta, "EVICT": e})).asm["ptx"] for e in (0, 1)}
    assert "evict_first" in ptx[1] and "evict_first" not in ptx[0]


def _launches_bind(switch: str, dtype: torch.dtype, width: int, card: str = "", kernel: str = "ln_qkv",
                   **kw: Any) -> list[bool]:
    """Whether each `kernel` launch (ln_qkv unless named) binds `switch` in a one-layer PDL plan of this width at batch 1
    (aot.plan_for_shapes, no device; `kw`: prefetch, fold), built as `card` would take it (the plan records that card)."""
    from lab.contract.profiles import ModelSpec
    from lab.step.fused import aot

    plan = aot.plan_for_shapes(ModelSpec("one-layer", 1, width, width // 64, vocab_size=512), dtype, 1, pdl=True,
                               card=card, **kw)
    assert plan.card == card
    return [bool(x.meta.get(switch)) for x in plan.launches if x.name == kernel]


def _binds_where_measured(switch: str, kernel: str, card: str, dtype: torch.dtype, width: int, expected: bool,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-card table's switch (configs.*_FIRST): `kernel`'s launch binds it on the PREFETCH path as `expected`, never
    on the plain gemv path (fused-pdl), and the same in Triton's interpreter (a constexpr or a select, which it runs)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert _launches_bind(switch, dtype, width, card=card, kernel=kernel, prefetch=True) == [expected]
    assert _launches_bind(switch, dtype, width, card=card, kernel=kernel) == [False]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _launches_bind(switch, dtype, width, card=card, kernel=kernel, prefetch=True) == [expected]


@needs_triton
@pytest.mark.parametrize("dtype, width, asks", [(torch.float32, 768, True), (torch.bfloat16, 768, False),
                                                (torch.float32, 1600, True), (torch.bfloat16, 1600, True)])
def test_the_folded_prefetch_plan_asks_l2_for_k_and_v_before_its_wait_where_that_measured_faster(
        dtype: torch.dtype, width: int, asks: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs.KV_L2_FIRST: the folded ln_qkv of the PREFETCH path binds KV_L2 (its heads' K and V asked into L2 before
    the PDL wait) at GPT-2 124M fp32, 1.5B bf16 and 1.5B fp32 (0.954x, 0.982x and 0.999x the step's time on the H200),
    not at 124M bf16 (1.009x); never unfolded, never off the PREFETCH path, never where the instruction
    cannot run (Triton's interpreter runs no inline assembly)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert C.kv_l2(str(dtype), width) == asks

    def bound(**kw: Any) -> list[bool]:
        return _launches_bind("KV_L2", dtype, width, **kw)

    assert bound(prefetch=True) == [asks]
    assert bound(prefetch=True, fold=False) == [False] and bound() == [False]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert bound(prefetch=True) == [False]


@needs_triton
@pytest.mark.parametrize("card, dtype, width, asks", [
    (C.H100_SXM, torch.float32, 768, True), (C.H100_SXM, torch.bfloat16, 1600, True),
    (C.H100_SXM, torch.bfloat16, 768, False), (C.H100_SXM, torch.float32, 1600, False),
    ("NVIDIA H200", torch.float32, 768, False), ("NVIDIA H200", torch.bfloat16, 1600, False),
    ("", torch.float32, 768, False), ("NVIDIA H100 PCIe", torch.bfloat16, 1600, False)])
def test_the_folded_prefetch_plan_asks_for_k_and_v_at_once_on_the_cards_where_that_measured_faster(
        card: str, dtype: torch.dtype, width: int, asks: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs.KV_AT_ONCE_FIRST: on an H100 SXM the folded ln_qkv of the PREFETCH path binds KV_AT_ONCE (each chunk's K
    and V in one round trip) at GPT-2 124M fp32 and 1.5B bf16 (0.987x/0.991x and 0.980x/0.981x the step's time on two
    H100s), not at 124M bf16 or 1.5B fp32 (0.997-1.000x there); never on the H200 (0.998-1.012x), on a card not measured or
    without one (the CPU); never unfolded, never off the PREFETCH path. A select, so Triton's interpreter runs it too."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert C.kv_at_once(str(dtype), width, card) == asks
    assert _launches_bind("KV_AT_ONCE", dtype, width, card=card, prefetch=True, fold=False) == [False]  # unfolded
    _binds_where_measured("KV_AT_ONCE", "ln_qkv", card, dtype, width, asks, monkeypatch)
    assert C.device_card("cpu") == "" and C.device_card(None) == ""  # the CPU has no card: the tables every card takes


@needs_triton
@pytest.mark.parametrize("card, dtype, width, sums", [
    (C.H100_SXM, torch.bfloat16, 1600, True), (C.H100_SXM, torch.float32, 1600, False),
    (C.H100_SXM, torch.bfloat16, 768, False), (C.H100_SXM, torch.float32, 768, False),
    (C.H200, torch.bfloat16, 1600, True), (C.H200, torch.float32, 1600, False), ("", torch.bfloat16, 1600, False),
    ("NVIDIA H100 PCIe", torch.bfloat16, 1600, False)])
def test_the_prefetch_plans_lm_head_sums_over_k_once_on_the_cards_where_that_measured_faster(
        card: str, dtype: torch.dtype, width: int, sums: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs.SUM_ONCE_FIRST: on an H100 SXM and an H200 the PREFETCH path's lm_head binds SUM_ONCE (its products
    summed over K once, after its loop) at GPT-2 1.5B bf16 (0.996x the step's time on two H100s, 0.993x on two H200s),
    not at 1.5B fp32 or 124M (1.000x, 1.008x, 1.010x on the first); never on a card not measured for it (an H100 PCIe)
    or without one (the CPU), never off the PREFETCH path. A constexpr of the kernel, so Triton's interpreter runs it
    too."""
    assert C.sum_once(str(dtype), width, card) == sums
    _binds_where_measured("SUM_ONCE", "lm_head", card, dtype, width, sums, monkeypatch)


@needs_triton
@pytest.mark.parametrize("card, dtype, width, held", [
    (C.H100_SXM, torch.float32, 1600, True), (C.H100_SXM, torch.bfloat16, 1600, False),
    (C.H100_SXM, torch.float32, 768, False), (C.H100_SXM, torch.bfloat16, 768, False),
    (C.H200, torch.float32, 1600, True), (C.H200, torch.bfloat16, 1600, False), ("", torch.float32, 1600, False),
    ("NVIDIA H100 PCIe", torch.float32, 1600, False)])
def test_the_prefetch_plans_ln_qkv_holds_its_row_in_pieces_on_the_cards_where_that_measured_faster(
        card: str, dtype: torch.dtype, width: int, held: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs.PIECES_FIRST: on an H100 SXM and an H200 the PREFETCH path's ln_qkv binds PIECES (its row in pieces of
    powers of two: three programs an SM) at GPT-2 1.5B fp32 (0.983-0.984x the step's time in three A/Bs on an H100,
    0.983x on an H200), not in bf16 (1.011x, 1.002x) nor at 124M; never on a card not measured for it (an H100 PCIe) or
    without one (the CPU), never off the PREFETCH path, and on no other kernel (ln_fc's was level or slower). A
    constexpr: Triton's interpreter runs it too."""
    assert C.pieces(str(dtype), width, card) == held
    assert _launches_bind("PIECES", dtype, width, card=card, kernel="ln_fc", prefetch=True) == [False]
    _binds_where_measured("PIECES", "ln_qkv", card, dtype, width, held, monkeypatch)


_H100_TILES = {("proj", torch.bfloat16, 1600): C.GemvConfig(1, 2, 2048, 2)}


@pytest.mark.parametrize("card", [C.H100_SXM, "NVIDIA H200", "NVIDIA H100 PCIe", ""])
@pytest.mark.parametrize("kernel, dtype, width", [("proj", torch.bfloat16, 1600), ("attention", torch.bfloat16, 768),
                                                  ("proj", torch.bfloat16, 768), ("attention", torch.bfloat16, 1600),
                                                  ("proj", torch.float32, 1600), ("attention", torch.float32, 768)])
def test_the_prefetch_tiles_an_h100_timed_faster_are_that_cards_alone(card: str, kernel: str, dtype: torch.dtype,
                                                                       width: int) -> None:
    """configs.TUNED_PREFETCH_BY_CARD: on an H100 SXM the PREFETCH path binds proj at 2 warps at GPT-2 1.5B bf16
    (0.985-0.986x the step's time on one H100, 1.006-1.009x taken off on two more); not the attention's chunk at 124M
    bf16 (what moved there was the order the A/B built its plans in); at the other shapes, on the H200, a card not
    measured or none (the CPU) the H200's TUNED_PREFETCH as it was; never off the PREFETCH path, at another batch or
    when the tuner asks for no table."""
    heads = width // 64

    def chosen(batch: int = 1, **kw: Any) -> C.Config:
        return C.choose(width, heads, 50257, 256, batch, dtype, 132, **({"prefetch": True, "card": card} | kw))[kernel]

    dname = str(dtype).removeprefix("torch.")
    table = C.TUNED_PREFETCH[(kernel, dname, 1, width)]
    want = _H100_TILES.get((kernel, dtype, width)) if card == C.H100_SXM else None
    assert chosen() == (want or type(chosen())(**table))
    assert want is None or want != type(want)(**table)  # (the H100's differs from the H200's)
    assert chosen(prefetch=False) == C.choose(width, heads, 50257, 256, 1, dtype, 132)[kernel]  # plain gemv: TUNED
    assert chosen(batch=8) == C.choose(width, heads, 50257, 256, 8, dtype, 132, prefetch=True)[kernel]
    assert chosen(tuned={}) == C.choose(width, heads, 50257, 256, 1, dtype, 132, tuned={}, prefetch=True)[kernel]


@needs_triton
@pytest.mark.parametrize("card", [C.H100_SXM, "NVIDIA H200"])
def test_the_plan_takes_the_prefetch_tiles_of_its_card(card: str) -> None:
    """step.prepare passes the plan's card to the tables: a PREFETCH plan at 1.5B bf16 (one layer) built as an H100 SXM
    runs proj at 2 warps, as the H200 at 4; at 124M bf16 the folded attention walks the cache in chunks of 32 slots on
    both. The same plans without PDL's prefetch path: the tables' for the plain gemv path."""
    from lab.contract.profiles import ModelSpec
    from lab.step.fused import aot

    h100 = card == C.H100_SXM
    for width, kernel, want, table in ((1600, "proj", 2 if h100 else 4, 4), (768, "attention", 32, 32)):
        spec = ModelSpec("one-layer", 1, width, width // 64, vocab_size=512)
        plan = aot.plan_for_shapes(spec, torch.bfloat16, 1, pdl=True, prefetch=True, card=card)
        got = plan.configs[kernel]
        assert (got.num_warps if kernel == "proj" else got.BS) == want, got
        plain = aot.plan_for_shapes(spec, torch.bfloat16, 1, pdl=True, card=card).configs[kernel]
        assert plain == C.choose(width, width // 64, 512, 256, 1, torch.bfloat16, 132)[kernel]
        assert table == (C.TUNED_PREFETCH[(kernel, "bfloat16", 1, width)]["num_warps" if kernel == "proj" else "BS"])


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size, kernel", [("gpt2-1.5B", "proj")])
def test_the_h100s_prefetch_tiles_compile_for_hopper_without_a_spill(size: str, kernel: str) -> None:
    """The ahead-of-time checks of the launches TUNED_PREFETCH_BY_CARD changes on an H100 SXM (bf16): 1.5B's proj at 2
    warps: sm_90, at most 255 registers, no spill, PDL's two griddepcontrol instructions."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), torch.bfloat16, 1, pdl=True,
                               prefetch=True, card=C.H100_SXM)
    assert plan.configs[kernel] == _H100_TILES[(kernel, torch.bfloat16, spec.n_embd)], plan.configs
    [launch] = [x for x in plan.launches if x.name == kernel and not x.meta.get("EMBED")][-1:]
    [k] = aot.compile_plan(replace(plan, launches=[launch]))
    assert k.registers is not None and k.registers <= 255 and k.spill_bytes == 0, k
    assert k.grid_dependency_ops == 2, k


@needs_triton
@pytest.mark.slow
def test_the_bf16_residual_plan_compiles_for_hopper_without_a_spill() -> None:
    """The ahead-of-time checks of every launch of a plan whose residual stream is bf16 (step.prepare's `residual`; the
    A/B's `plan:RESIDUAL_BF16=1`, an experiment, bound nowhere), GPT-2 124M's width, two layers, PDL and the PREFETCH
    kernels: sm_90, at most 255 registers, PDL's two griddepcontrol instructions each, no spill but in ln_qkv, where
    ptxas keeps 80 registers (90-96 with the fp32 residual) and spills 8 bytes (Triton 3.6): what its A/B times."""
    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES["gpt2-124M"]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), torch.bfloat16, 1, pdl=True,
                               prefetch=True, residual=torch.bfloat16)
    assert plan.residual == "bfloat16" and plan.workspace.x.dtype == torch.bfloat16
    compiled = aot.compile_plan(plan)
    assert len(compiled) >= 5, compiled  # ln_qkv (embedding and not), proj, ln_fc, fc2, lm_head, argmax
    for k in compiled:
        assert k.registers is not None and k.registers <= 255 and k.grid_dependency_ops == 2, k
        assert k.spill_bytes == 0 or (k.name == "ln_qkv" and k.spill_bytes <= 8), k


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size, dtype", [("gpt2-124M", torch.float32), ("gpt2-1.5B", torch.bfloat16)])
def test_the_h100s_bound_kv_at_once_compiles_for_hopper_without_a_spill(size: str, dtype: torch.dtype) -> None:
    """The ahead-of-time checks of the ln_qkv an H100 SXM binds KV_AT_ONCE on (configs.KV_AT_ONCE_FIRST): sm_90, at
    most 255 registers, no spill, no tensor-core instruction, PDL's two griddepcontrol instructions, its one count-in
    atomic; and every load of its fold tail before the first exchange between threads (the round trip it saves)."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True,
                               prefetch=True, card=C.H100_SXM)
    [launch] = [x for x in plan.launches if x.name == "ln_qkv" and not x.meta.get("EMBED")][-1:]
    assert launch.meta.get("KV_AT_ONCE") is True, launch.meta
    [k] = aot.compile_plan(replace(plan, launches=[launch]))
    assert k.registers is not None and k.registers <= 255 and k.spill_bytes == 0, k
    assert k.tensor_core_ops == 0 and k.grid_dependency_ops == 2 and (k.atomics, k.unpredicated_atomics) == (1, 0), k
    if k.tail_late_loads is None:
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    assert k.tail_late_loads == 0, k


@needs_triton
@pytest.mark.parametrize("dtype, width, folds", [(torch.float32, 768, False), (torch.bfloat16, 768, True),
                                                 (torch.float32, 1600, True), (torch.bfloat16, 1600, True)])
def test_the_prefetch_plan_folds_its_layer_norms_where_that_measured_faster(dtype: torch.dtype, width: int,
                                                                            folds: bool) -> None:
    """configs.LN_UNFOLDED: GPT-2 124M in fp32 keeps the PREFETCH layer norms unfolded (1.029x with them folded on the
    H200), every other shape folds them; the plan binds ln_qkv and ln_fc accordingly, and the other paths never."""
    from lab.contract.profiles import ModelSpec
    from lab.step.fused import aot

    spec = ModelSpec("one-layer", 1, width, width // 64, vocab_size=512)
    assert C.ln_fold(str(dtype), width) == folds
    for prefetch in (True, False):
        plan = aot.plan_for_shapes(spec, dtype, 1, pdl=True, prefetch=prefetch)
        metas = [x.meta for x in plan.launches if x.name in ("ln_qkv", "ln_fc")]
        assert len(metas) == 2 and all(bool(m.get("LN_FOLD")) == (folds and prefetch) for m in metas), metas


@needs_triton
def test_pdl_is_refused_without_hopper(tiny_fp32) -> None:
    from lab.step.decode import new_state
    from lab.step.fused.step import prepare

    with pytest.raises(ValueError, match="fused-pdl: .*CUDA device"):
        prepare(new_state(tiny_fp32, 1, 16), tiny_fp32, pdl=True)


@needs_triton
def test_tuner_search_picks_the_fastest_candidate(tiny_fp32) -> None:
    """The tuner's search with a fake clock that prefers proj BN=16, BK=64, 2 warps (no kernel runs)."""
    from lab.step.fused import tune as T

    def fake(plan, rep_ms):
        assert plan.path == "gemv"  # the tuner tunes the gemv path's configs, at any batch
        cfg = plan.configs["proj"]
        return 1.0 + abs(cfg.BN - 16) + abs(cfg.BK - 64) / 64 + 0.01 * abs(cfg.num_warps - 2)

    for batch in (1, 8):
        lines: list[str] = []
        best, tried = T.tune(tiny_fp32, batch, 8, 1, float("inf"), lines.append, timer=fake, max_len=64)
        assert (best["proj"].BN, best["proj"].BK, best["proj"].num_warps) == (16, 64, 2), lines
        assert len(tried["proj"]) > 3 and sorted(tried) == sorted(C.KERNEL_NAMES)
        assert {c.num_warps for c, _ in tried["proj"]} >= {1, 2, 4, 8}, tried["proj"]  # one warp: no CTA barrier


@needs_triton
def test_tuner_from_the_table_starts_each_kernel_at_the_config_the_table_binds(tiny_fp32, monkeypatch) -> None:
    """--from-table: each kernel's first candidate is the tables' config (here a TUNED entry for the tiny width), not
    the heuristics'; without it the descent starts from the heuristics as before (no kernel runs: a fake clock)."""
    from lab.step.fused import tune as T

    E, V = tiny_fp32.n_embd, int(tiny_fp32.wte.shape[0])
    heuristic = C.choose(E, tiny_fp32.n_head, V, 64, 1, tiny_fp32.dtype, 8, tuned={})["proj"]
    assert isinstance(heuristic, C.GemvConfig)
    table = C.GemvConfig(heuristic.BB, heuristic.BN * 2, heuristic.BK, 2 if heuristic.num_warps != 2 else 4)
    monkeypatch.setattr(C, "TUNED", {("proj", "float32", 1, E): dict(table.__dict__)})
    for from_table, first in ((True, table), (False, heuristic)):
        best, tried = T.tune(tiny_fp32, 1, 8, 1, float("inf"), [].append, timer=lambda plan, rep: 1.0, max_len=64,
                             from_table=from_table)
        assert tried["proj"][0][0] == first, (from_table, tried["proj"][:2])
        assert best["proj"] == first  # every candidate ties: the first stays best


@needs_triton
def test_the_tuners_report_times_the_tuned_and_the_tables_step_with_and_without_pdl(tiny_fp32, monkeypatch) -> None:
    """report_step's plans, in order: the heuristics' step, then what the descent found and (--from-table) the tables'
    step, without PDL and, where the device has it, with (no kernel runs: a fake clock, PDL claimed on the CPU)."""
    from lab.step.fused import step as S, tune as T

    E, V = tiny_fp32.n_embd, int(tiny_fp32.wte.shape[0])
    real_state = T.timing_state
    monkeypatch.setattr(T, "MAX_LEN", 64)  # the tiny model has 128 positions
    monkeypatch.setattr(T, "timing_state", lambda w, batch: real_state(w, batch, 64))
    table = C.choose(E, tiny_fp32.n_head, V, 64, 1, tiny_fp32.dtype, 8, prefetch=True)
    proj = table["proj"]
    assert isinstance(proj, C.GemvConfig)
    best = {**table, "proj": replace(proj, num_warps=2 if proj.num_warps != 2 else 4)}
    timed: list[tuple[bool, object]] = []
    monkeypatch.setattr(T, "step_ms", lambda plan, rep: timed.append((plan.pdl, plan.configs["proj"])) or 1.0)
    monkeypatch.setattr(T, "breakdown", lambda plan: [("a kernel", 1, 1.0)])
    for pdl, from_table, labels in (
            (True, True, ["default", "tuned+prefetch", "table+prefetch", "tuned+pdl+prefetch", "table+pdl+prefetch"]),
            (True, False, ["default", "tuned+prefetch", "tuned+pdl+prefetch"]),
            (False, True, ["default", "tuned+prefetch", "table+prefetch"])):
        monkeypatch.setattr(S, "pdl_supported", lambda device, ok=pdl: (ok, "" if ok else "no PDL here"))
        lines: list[str] = []
        timed.clear()
        T.report_step(tiny_fp32, 1, 8, best, 1, 1000.0, lines.append, prefetch=True, from_table=from_table)
        step = next(x for x in lines if x.startswith("  step: "))
        assert [x.split(" ")[0] for x in step.removeprefix("  step: ").split(", ")] == labels, step
        assert [p for p, _ in timed] == ["pdl" in x for x in labels]
        assert [c for _, c in timed][1:] == [best["proj"] if x.startswith("tuned") else proj for x in labels[1:]]
        assert ("no PDL here" in step) == (not pdl)


def test_tuner_candidates_are_bounded_in_bytes_so_bf16_tries_twice_the_values() -> None:
    """GPT-2 1.5B's ln_fc, one chunk (BK 2048): fp32 candidates stop at 64 KB (BN 8), bf16 ones at BN 16."""
    from lab.step.fused import tune as T

    default = C.GemvConfig(1, 4, 2048, 4)
    for elem_bytes, widest in ((4, 8), (2, 16)):
        cands = T.first_pass("ln_fc", default, 6400, 1600, 1, 132, 256, prefetch=True, elem_bytes=elem_bytes)
        assert cands[0] == default and {c.BK for c in cands} == {2048}, cands
        assert max(c.BN for c in cands) == widest, cands


def test_an_ab_arm_is_read_as_config_fields_and_launch_switches_by_kernel() -> None:
    from lab.step.fused.ab import parse_arm

    assert parse_arm("table").configs == {} and parse_arm("table").switches == {}
    arm = parse_arm("ln_fc.BN=4; ln_fc.num_warps=8;ln_qkv:HEAD_MAJOR=1;all:EVICT=0")
    assert arm.configs == {"ln_fc": {"BN": 4, "num_warps": 8}}
    assert arm.switches == {"ln_qkv": {"HEAD_MAJOR": 1}, "all": {"EVICT": 0}}
    for bad, says in (("ln_fc.BN", "is not KERNEL.FIELD=INTEGER"), ("ln_fc.BN=four", "is not KERNEL.FIELD=INTEGER"),
                      ("BN=4", "names no kernel"), ("lnfc.BN=4", "no kernel 'lnfc'"),
                      ("all.BN=4", "names one kernel, not 'all'")):
        with pytest.raises(ValueError, match=says):
            parse_arm(bad)


@needs_triton
def test_an_ab_arm_binds_its_fields_and_switches_and_refuses_what_the_plan_has_not(tiny_fp32) -> None:
    from lab.step.decode import new_state
    from lab.step.fused.ab import bind, parse_arm
    from lab.step.fused.step import Launch, prepare

    state = new_state(tiny_fp32, 1, 16)

    def made(overrides: dict | None = None):
        return prepare(state, tiny_fp32, sms=2, repeatable=True, prefetch=True, path="gemv", overrides=overrides)

    base = made()
    again = bind(base, parse_arm("table"), made)  # every arm its own plan, the table's too (the A/A needs a second)
    assert again is not base and again.configs == base.configs and again.workspace.x is not base.workspace.x
    assert [x.meta for x in again.launches] == [x.meta for x in base.launches]
    wide = bind(base, parse_arm("ln_fc.BN=8;ln_fc.num_warps=2"), made)
    assert (wide.configs["ln_fc"].BN, wide.configs["ln_fc"].num_warps) == (8, 2) and wide.configs["fc2"] == base.configs["fc2"]
    marked = bind(base, parse_arm("all:EVICT=1;fc2:PREFETCH=0"), made)
    for before, after in zip(base.launches, marked.launches):  # the GEMV kernels have the EVICT switch
        assert isinstance(after, Launch) and (after.name, after.grid) == (before.name, before.grid)
        assert after.meta.get("EVICT", 0) == (1 if after.name in C.GEMV_KERNELS else 0), after.name
        assert after.meta.get("PREFETCH") == (False if after.name == "fc2" else before.meta.get("PREFETCH"))
    capped = bind(base, parse_arm("ln_qkv:maxnreg=96"), made)  # a launch option: any Triton launch takes it
    assert [x.meta.get("maxnreg") for x in capped.launches] == [96 if x.name == "ln_qkv" else None
                                                               for x in base.launches]
    with pytest.raises(ValueError, match="no launch of this plan takes argmax:HEAD_MAJOR"):
        bind(base, parse_arm("argmax:HEAD_MAJOR=1"), made)
    with pytest.raises(ValueError, match="has no field BQ"):
        bind(base, parse_arm("ln_fc.BQ=2"), made)


@needs_triton
def test_an_ab_arm_builds_its_plan_with_a_bf16_residual_where_asked_and_only_over_bf16_weights(tiny_fp32) -> None:
    """`plan:RESIDUAL_BF16=1`: the arm's plan keeps x and x_scratch in bf16 (step.prepare's `residual`), every other
    buffer as it was; over fp32 weights, or on the gemm path, the plan refuses it in one line."""
    from lab.step.decode import new_state
    from lab.step.fused.ab import bind, parse_arm
    from lab.step.fused.check import weights_for
    from lab.step.fused.step import prepare

    arm = parse_arm("plan:RESIDUAL_BF16=1;ln_fc.num_warps=2")
    assert arm.options == {"RESIDUAL_BF16": 1} and arm.configs == {"ln_fc": {"num_warps": 2}} and arm.switches == {}
    with pytest.raises(ValueError, match="no plan option 'RESIDUAL'"):
        parse_arm("plan:RESIDUAL=1")
    w = weights_for("tiny", dtype=torch.bfloat16)
    for weights, ok in ((w, True), (tiny_fp32, False)):
        state = new_state(weights, 1, 16)

        def made(overrides: dict | None = None, **kw):
            return prepare(state, weights, sms=2, repeatable=True, prefetch=True, path="gemv", overrides=overrides,
                           **kw)

        base = made()
        if not ok:
            with pytest.raises(ValueError, match="arm .*: fused step: a residual in torch.bfloat16 \\(float32 or"):
                bind(base, arm, made)
            continue
        low = bind(base, arm, made)
        assert low.residual == "bfloat16" and base.residual == "float32", (low.residual, base.residual)
        assert low.workspace.x.dtype == low.workspace.x_scratch.dtype == torch.bfloat16
        assert {k: t.dtype for k, t in vars(low.workspace).items() if isinstance(t, torch.Tensor) and k not in (
            "x", "x_scratch")} == {k: t.dtype for k, t in vars(base.workspace).items() if isinstance(t, torch.Tensor)
                                   and k not in ("x", "x_scratch")}
        assert low.configs["ln_fc"].num_warps == 2 and bind(base, parse_arm("table"), made).residual == "float32"
        with pytest.raises(ValueError, match="on the gemm path"):
            prepare(state, weights, sms=2, path="gemm", residual=torch.bfloat16)


@needs_triton
def test_an_ab_arm_folds_the_argmax_into_lm_head_where_asked_and_leaves_it_a_launch_at_0(tiny_fp32, monkeypatch) -> None:
    """`plan:ARGMAX_FOLD=1`: the arm's plan takes the argmax in lm_head's last program (step.prepare's argmax_fold);
    `=0` keeps the launch even where configs.ARGMAX_FOLD binds the fold, and `table` follows the table."""
    from lab.step.decode import new_state
    from lab.step.fused.ab import bind, parse_arm
    from lab.step.fused.step import prepare

    state = new_state(tiny_fp32, 1, 16)

    def made(overrides: dict | None = None, **kw):
        return prepare(state, tiny_fp32, sms=2, repeatable=True, prefetch=True, path="gemv", overrides=overrides, **kw)

    base = made()
    arm = parse_arm("plan:ARGMAX_FOLD=1;lm_head.num_warps=2")
    assert arm.options == {"ARGMAX_FOLD": 1} and arm.configs == {"lm_head": {"num_warps": 2}}
    folded = bind(base, arm, made)
    assert folded.argmax_fold and not base.argmax_fold and folded.configs["lm_head"].num_warps == 2
    assert [x.name for x in folded.launches][-1] == "lm_head" and folded.launches[-1].meta["ARGMAX_FOLD"]
    monkeypatch.setattr(C, "ARGMAX_FOLD", {("float32", tiny_fp32.n_embd)})
    assert bind(base, parse_arm("table"), made).argmax_fold
    assert not bind(base, parse_arm("plan:ARGMAX_FOLD=0"), made).argmax_fold


def test_an_ab_arm_reads_a_kernel_left_out_or_idled_as_a_bound_and_refuses_what_is_not_one() -> None:
    """`KERNEL:ABSENT=1` and `KERNEL:IDLE=1` are bounds (Arm.bounds), not switches of a kernel: they name one of the
    step's kernels, take 1, and a kernel is one or the other; the console says which arms are bounds."""
    from lab.step.fused.ab import bound_note, parse_arm

    arm = parse_arm("proj:ABSENT=1;fc2:IDLE=1;ln_fc.num_warps=2")
    assert arm.bounds == {"proj": "ABSENT", "fc2": "IDLE"} and arm.switches == {} and arm.bound
    assert arm.configs == {"ln_fc": {"num_warps": 2}}
    table = parse_arm("table")
    assert not table.bound and bound_note([table]) is None
    note = bound_note([table, arm])
    assert note is not None and "bounds, not steps" in note and arm.label in note and "table," not in note
    for bad, says in (("all:ABSENT=1", "ABSENT names one of the step's kernels .*not 'all'"),
                      ("lnfc:IDLE=1", "IDLE names one of the step's kernels .*not 'lnfc'"),
                      ("proj:ABSENT=0", "ABSENT takes 1"), ("proj:ABSENT=1;proj:IDLE=1", "proj is both ABSENT and IDLE")):
        with pytest.raises(ValueError, match=says):
            parse_arm(bad)


def test_an_ab_arm_with_a_switch_that_is_timing_only_is_a_bound_and_priced_by_what_it_saved_alone() -> None:
    """A stage left out (`LEAVE_OUT` not 0) or a kernel's FOLD bound apart from its plan's fold makes the arm a bound
    (printed as one, its values not the step's), whatever else it changes; `LEAVE_OUT=0` and a switch of the step's
    own kernels (HEAD_MAJOR) do not. Such an arm is priced by what it saved, never by bytes or launches it did not
    leave out."""
    from lab.step.fused import traffic as T
    from lab.step.fused.ab import beyond_bytes, bound_note, left_out, parse_arm

    labels = ("table", "ln_qkv:LEAVE_OUT=16", "ln_qkv:FOLD=0", "ln_qkv:LEAVE_OUT=0", "ln_qkv:HEAD_MAJOR=1",
              "ln_qkv:LEAVE_OUT=16;proj:ABSENT=1", "proj:ABSENT=1")
    arms = [parse_arm(x) for x in labels]
    bound = {a.label for a in arms if a.bound}
    assert bound == {"ln_qkv:LEAVE_OUT=16", "ln_qkv:FOLD=0", "ln_qkv:LEAVE_OUT=16;proj:ABSENT=1", "proj:ABSENT=1"}
    assert parse_arm("ln_qkv:FOLD=0;ln_qkv:HEAD_MAJOR=1").timing_only == ["ln_qkv:FOLD=0"]
    assert parse_arm("all:LEAVE_OUT=2").bound and parse_arm("plan:FOLD=0").timing_only == []
    note = bound_note(arms)
    assert note is not None and "ln_qkv:LEAVE_OUT=16, ln_qkv:FOLD=0" in note and "HEAD_MAJOR" not in note
    assert "LEAVE_OUT=0" not in note and "timing only" in note
    calls = T.calls(T.Shape(2, 64, 2, 100, 1, 4, 16), T.Layout("gemv-prefetch", 1, 1, fold=True, ln_fold=True), 5)
    left = left_out(arms, {x: calls for x in labels})
    median = dict(zip(labels, (1.0, 0.9, 0.8, 1.0, 1.0, 0.7, 0.95)))
    rows = beyond_bytes(arms, median, left, 4000.0)
    assert rows["ln_qkv:LEAVE_OUT=16"]["against"] == "table"
    assert rows["ln_qkv:LEAVE_OUT=16"]["saved_us"] == pytest.approx(100.0)
    assert rows["ln_qkv:FOLD=0"]["saved_us"] == pytest.approx(200.0)
    assert set(rows["ln_qkv:LEAVE_OUT=16;proj:ABSENT=1"]) == {"against", "saved_us"}  # its bytes are not all it left
    assert "bytes_us" in rows["proj:ABSENT=1"] and "ln_qkv:HEAD_MAJOR=1" not in rows
    # against the arm of its own plan: the same switches but the timing-only one (an H200's A/B priced
    # "ln_qkv:KV_AT_ONCE=1;ln_qkv:LEAVE_OUT=16" against the table, not against "ln_qkv:KV_AT_ONCE=1")
    twins = [parse_arm(x) for x in ("table", "ln_qkv:KV_AT_ONCE=1", "ln_qkv:KV_AT_ONCE=1;ln_qkv:LEAVE_OUT=16")]
    rows = beyond_bytes(twins, dict(zip([a.label for a in twins], (1.2, 1.19, 1.09))), left_out(twins, {
        a.label: calls for a in twins}), 4000.0)
    assert rows["ln_qkv:KV_AT_ONCE=1;ln_qkv:LEAVE_OUT=16"]["against"] == "ln_qkv:KV_AT_ONCE=1"
    assert rows["ln_qkv:KV_AT_ONCE=1;ln_qkv:LEAVE_OUT=16"]["saved_us"] == pytest.approx(100.0)


def test_an_ab_bound_is_priced_at_the_cards_copy_rate_and_an_idle_one_against_its_absent_twin() -> None:
    """What a bound saved against the first arm, µs a step; an ABSENT arm's kernels' bytes from memory (weights, K and
    V, as lab.step.fused.traffic declares them for the table's plan) at the card's copy rate and what it saved beyond
    them; an IDLE arm's launches against the ABSENT arm of the same kernels (IDLE - ABSENT, and a launch's share). No
    copy rate: no bytes priced, and the console says so. An arm that is no bound has no row."""
    from lab.step.fused import traffic as T
    from lab.step.fused.ab import beyond_bytes, bytes_note, left_out, parse_arm

    calls = T.calls(T.Shape(2, 64, 2, 100, 1, 4, 16), T.Layout("gemv-prefetch", 1, 1, fold=True, ln_fold=True), 5)
    unfolded = T.calls(T.Shape(2, 64, 2, 100, 1, 4, 16), T.Layout("gemv-prefetch", 1, 1, ln_fold=True), 5)
    labels = ("table", "proj:ABSENT=1", "proj:IDLE=1", "proj:ABSENT=1;fc2:ABSENT=1", "fc2:IDLE=1", "ln_fc.BN=2",
              "ln_qkv:ABSENT=1", "plan:FOLD=0;attention:ABSENT=1", "plan:FOLD=0;proj:IDLE=1")
    arms = [parse_arm(x) for x in labels]
    left = left_out(arms, {x: unfolded if x.startswith("plan:FOLD=0") else calls for x in labels})
    assert set(left) == {"proj:ABSENT=1", "proj:IDLE=1", "proj:ABSENT=1;fc2:ABSENT=1", "fc2:IDLE=1", "ln_qkv:ABSENT=1",
                         "plan:FOLD=0;attention:ABSENT=1", "plan:FOLD=0;proj:IDLE=1"}
    attention = [c for c in unfolded if c.kernel == "attention"]
    assert attention and not any(c.kernel == "attention" for c in calls)  # the arm's own plan prices its bound
    assert left["plan:FOLD=0;attention:ABSENT=1"] == {"bytes": sum(c.kv_read + c.kv_write for c in attention),
                                                      "launches": 2}
    proj = sum(c.weights for c in calls if c.kernel == "proj")
    fc2 = sum(c.weights for c in calls if c.kernel == "fc2")
    qkv = [c for c in calls if c.kernel == "ln_qkv"]
    assert proj > 0 and fc2 > 0 and all(c.kv_read > 0 for c in qkv)  # the folded attention reads the cache
    assert left["proj:ABSENT=1"] == {"bytes": proj, "launches": 2} == left["proj:IDLE=1"]
    assert left["proj:ABSENT=1;fc2:ABSENT=1"] == {"bytes": proj + fc2, "launches": 4}
    assert left["ln_qkv:ABSENT=1"]["bytes"] == sum(c.weights + c.kv_read + c.kv_write for c in qkv)
    med = dict(zip(labels, (0.200, 0.190, 0.195, 0.170, 0.199, 0.201, 0.150, 0.180, 0.196)))
    rows = beyond_bytes(arms, med, left, 1000.0)  # 1000 GB/s: 1e6 bytes a µs
    assert set(rows) == set(left)
    assert "launches_us" not in rows["plan:FOLD=0;proj:IDLE=1"]  # proj:ABSENT=1 is another plan's: no twin
    assert rows["proj:ABSENT=1"]["saved_us"] == pytest.approx(10.0)
    assert rows["proj:ABSENT=1"]["bytes_us"] == pytest.approx(proj / 1e6)
    assert rows["proj:ABSENT=1"]["beyond_us"] == pytest.approx(10.0 - proj / 1e6)
    assert rows["proj:ABSENT=1;fc2:ABSENT=1"]["beyond_us"] == pytest.approx(30.0 - (proj + fc2) / 1e6)
    assert rows["proj:IDLE=1"]["launches_us"] == pytest.approx(5.0) and "bytes_us" not in rows["proj:IDLE=1"]
    assert rows["proj:IDLE=1"]["per_launch_us"] == pytest.approx(2.5)
    assert set(rows["fc2:IDLE=1"]) == {"against", "saved_us"}  # no arm leaves fc2 alone out: no launches' cost
    lines = bytes_note(rows, left, 1000.0)
    assert "1,000 GB/s" in lines[0] and len(lines) == 1 + len(rows)
    said = {line.split(": ", 1)[0].strip(): line for line in lines[1:]}
    assert "beyond them" in said["proj:ABSENT=1"] and "2 launches, idle, cost 5.0 more than none (2.50 a launch)" in \
        said["proj:IDLE=1"]
    unpriced = beyond_bytes(arms, med, left, None)
    assert all("bytes_us" not in r and "beyond_us" not in r for r in unpriced.values())
    assert "not measured" in bytes_note(unpriced, left, None)[0] and bytes_note({}, {}, None) == []


def test_an_ab_bound_is_priced_against_the_arm_of_its_own_plan_where_the_ab_has_one() -> None:
    """A bound on another plan (`plan:FOLD=0;attention:ABSENT=1`) saved what it saved against that plan's arm
    (`plan:FOLD=0`), not against the first (the folded table, which differs in more than the bound): the H100's fold
    study of 2026-12-07 printed -79.3 µs "beyond" the attention's bytes, which was the unfolded plan's cost, not the
    attention's. Where the A/B has no arm of the bound's plan, the first arm prices it; the A/A arm never does; each
    console line names the arm it is priced against."""
    from lab.step.fused import traffic as T
    from lab.step.fused.ab import beyond_bytes, bytes_note, left_out, parse_arm, with_control

    folded = T.calls(T.Shape(2, 64, 2, 100, 1, 4, 16), T.Layout("gemv-prefetch", 1, 1, fold=True, ln_fold=True), 5)
    unfolded = T.calls(T.Shape(2, 64, 2, 100, 1, 4, 16), T.Layout("gemv-prefetch", 1, 1, ln_fold=True), 5)
    arms = with_control([parse_arm(x) for x in ("table", "ln_qkv:IDLE=1", "plan:FOLD=0", "plan:FOLD=0;attention:ABSENT=1",
                                                 "plan:FOLD=0;attention:IDLE=1", "proj.BN=4;proj:ABSENT=1")])
    labels = [a.label for a in arms]
    med = dict(zip(labels, (0.170, 0.120, 0.250, 0.245, 0.253, 0.160, 0.171)))
    left = left_out(arms, {x: unfolded if x.startswith("plan:FOLD=0") else folded for x in labels})
    rows = beyond_bytes(arms, med, left, 1000.0)  # 1000 GB/s: 1e6 bytes a µs
    kv = left["plan:FOLD=0;attention:ABSENT=1"]["bytes"]
    assert kv > 0
    assert rows["ln_qkv:IDLE=1"]["against"] == "table" and rows["ln_qkv:IDLE=1"]["saved_us"] == pytest.approx(50.0)
    absent = rows["plan:FOLD=0;attention:ABSENT=1"]
    assert absent["against"] == "plan:FOLD=0" and absent["saved_us"] == pytest.approx(5.0)  # not -75.0 (the table's)
    assert absent["beyond_us"] == pytest.approx(5.0 - kv / 1e6)
    idle = rows["plan:FOLD=0;attention:IDLE=1"]
    assert idle["against"] == "plan:FOLD=0" and idle["saved_us"] == pytest.approx(-3.0)
    assert idle["launches_us"] == pytest.approx(8.0)  # IDLE - ABSENT, unchanged
    assert rows["proj.BN=4;proj:ABSENT=1"]["against"] == "table"  # no arm of proj.BN=4 without the bound: the first
    assert rows["proj.BN=4;proj:ABSENT=1"]["saved_us"] == pytest.approx(10.0)
    said = {line.split(": ", 1)[0].strip(): line for line in bytes_note(rows, left, 1000.0)[1:]}
    assert "saved 5.0 against plan:FOLD=0;" in said["plan:FOLD=0;attention:ABSENT=1"]
    assert "saved 50.0 against table" in said["ln_qkv:IDLE=1"]


def test_ab_processes_price_the_pooled_bounds_at_the_best_of_their_copy_rates(monkeypatch, capsys) -> None:
    """`--processes N` starts N children (here stand-ins that print what a child prints) and prices the pooled medians'
    bounds at the best of the children's copy rates (the lab's copy rate is the best copy), in its console lines and
    its pooled record."""
    import json as _json

    from lab.step.fused import ab

    copies = iter((3000.0, 4000.0, 2000.0))

    def child(argv: list[str]) -> tuple[int, str, str]:
        rounds = {"table": [0.200, 0.201, 0.199], "proj:ABSENT=1": [0.190, 0.191, 0.189],
                  "table (again)": [0.200, 0.200, 0.201]}
        record = {"size": "gpt2-124M", "dtype": "float32", "batch": 1, "pdl": True, "card": "c",
                  "ratio": {k: 1.0 for k in rounds}, "rounds_ms": rounds, "copy_gbps": next(copies),
                  "left_out": {"proj:ABSENT=1": {"bytes": 4_000_000, "launches": 12}}}
        return 0, "H200, 3 rotated rounds:\nAB " + _json.dumps(record) + "\n", ""

    monkeypatch.setattr(ab, "_child", child)
    assert ab.main(["--processes", "3", "--size", "gpt2-124M", "--dtype", "float32", "table", "proj:ABSENT=1"]) == 0
    out = capsys.readouterr().out
    pooled = _json.loads(next(x for x in out.splitlines() if x.startswith("AB "))[3:])
    assert pooled["copy_gbps"] == pytest.approx(4000.0)
    row = pooled["beyond_bytes"]["proj:ABSENT=1"]
    assert row["saved_us"] == pytest.approx(10.0) and row["bytes_us"] == pytest.approx(1.0)  # 4 MB at 4 MB a µs
    assert "4,000 GB/s" in out and "proj:ABSENT=1: saved 10.0 against table; its 4.0 MB a step take 1.0 at the copy " \
        "rate, so 9.0 beyond them" in out


@needs_triton
def test_an_ab_bound_leaves_a_kernels_launches_out_or_makes_them_idle_and_keeps_every_other(tiny_fp32) -> None:
    """ABSENT: the plan without that kernel's launches, every other launch as it was, in order; IDLE: each of its
    launches the idle kernel with the launch's grid and warps and the plan's PDL, the rest as they were; a kernel the
    plan does not launch is refused in one line naming it."""
    from lab.step.decode import new_state
    from lab.step.fused.ab import bind, parse_arm, unbounded
    from lab.step.fused.kernels import idle_kernel
    from lab.step.fused.step import Launch, prepare

    state = new_state(tiny_fp32, 1, 16)

    def made(overrides: dict | None = None, **kw):
        return prepare(state, tiny_fp32, sms=2, repeatable=True, prefetch=True, path="gemv", overrides=overrides, **kw)

    base = made()
    names = [x.name for x in base.launches]
    assert names.count("proj") == tiny_fp32.n_layer and "fc2" in names
    absent = bind(base, parse_arm("proj:ABSENT=1;fc2:ABSENT=1"), made)
    kept = [x for x in base.launches if x.name not in ("proj", "fc2")]
    assert [(x.name, x.grid, x.meta) for x in absent.launches] == [(x.name, x.grid, x.meta) for x in kept]
    idle = bind(base, parse_arm("proj:IDLE=1;ln_fc.num_warps=2"), made)
    assert [x.name for x in idle.launches] == [("proj:idle" if n == "proj" else n) for n in names]
    for before, after in zip(base.launches, idle.launches):
        assert isinstance(before, Launch) and isinstance(after, Launch)
        if before.name == "proj":
            assert after.kernel is idle_kernel and after.grid == before.grid and after.args == ()
            assert after.meta == {"num_warps": before.meta["num_warps"], "USE_PDL": base.pdl}
        else:
            assert after.kernel is before.kernel and after.grid == before.grid
    assert idle.configs["ln_fc"].num_warps == 2
    assert "attention" in names and not base.fold  # no PDL here: five kernels a layer
    fold_on = unbounded(base, parse_arm("plan:FOLD=1;ln_qkv.BN=8;ln_qkv:IDLE=1"), made)
    assert fold_on.fold and "attention" not in [x.name for x in fold_on.launches]
    assert [x.name for x in bind(base, parse_arm("plan:FOLD=1;ln_qkv.BN=8;ln_qkv:IDLE=1"), made).launches] == [
        ("ln_qkv:idle" if x.name == "ln_qkv" else x.name) for x in fold_on.launches]
    no_attention = bind(base, parse_arm("plan:FOLD=0;attention:ABSENT=1"), made)
    assert [x.name for x in no_attention.launches] == [n for n in names if n != "attention"]
    folded = made(argmax_fold=True)
    with pytest.raises(ValueError, match="arm 'argmax:ABSENT=1': leaving kernels out: the plan .* has no launch of argmax"):
        bind(folded, parse_arm("argmax:ABSENT=1"), lambda overrides=None, **kw: made(overrides, argmax_fold=True))


@needs_triton
@pytest.mark.slow
def test_a_register_cap_bound_by_name_reaches_ptxas() -> None:
    """`maxnreg` (step.LAUNCH_OPTIONS) bound on ln_qkv by name, as an A/B arm binds it: GPT-2 1.5B bf16's folded ln_qkv
    (126 registers a thread: four of its 4-warp programs an SM, 600 programs in 1.14 waves of 132 SMs) compiles within
    96 (five an SM), spilling what does not fit; the uncapped build is unchanged."""
    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot
    from lab.step.fused.step import with_switches

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES["gpt2-1.5B"]
    plan = aot.plan_for_shapes(ModelSpec("one-layer", 1, spec.n_embd, spec.n_head), torch.bfloat16, 1, pdl=True,
                               prefetch=True)
    capped = with_switches(plan, {"ln_qkv": {"maxnreg": 96}})
    [before] = [x for x in plan.launches if x.name == "ln_qkv"]
    [after] = [x for x in capped.launches if x.name == "ln_qkv"]
    assert after.meta == {**before.meta, "maxnreg": 96} and "maxnreg" not in before.meta
    regs = {k: aot.ptxas_usage(aot.compile_launch(x).asm["ptx"])[0] for k, x in (("before", before), ("after", after))}
    assert regs["after"] is not None and regs["after"] <= 96 < (regs["before"] or 0), regs


def test_ab_rounds_rotate_the_arms_and_ratios_are_against_the_first() -> None:
    from lab.step.fused.ab import rounds, summary

    order: list[str] = []
    ms = {"a": 2.0, "b": 1.0, "c": 3.0}

    def timer(plan: str) -> float:
        order.append(plan)
        return ms[plan] + 0.01 * len(order)  # a drift every arm shares, round by round

    got = rounds({k: k for k in ms}, 3, timer)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [[len(r) for r in v] for v in got.values()] == [[1, 1, 1]] * 3
    out = summary(got)
    assert out["ratio"]["a"] == 1.0 and 0.45 < out["ratio"]["b"] < 0.55 and 1.4 < out["ratio"]["c"] < 1.6
    assert out["rounds_ms"] == {k: [r[0] for r in v] for k, v in got.items()}
    # each ratio has its paired interval around it, and the verdict against the first arm follows from it
    for arm in "bc":
        low, high = out["ratio_interval"][arm]
        assert low <= out["ratio"][arm] <= high and high - low < 0.05
        low, high = out["median_interval_ms"][arm]
        assert low <= out["median_ms"][arm] <= high
    assert out["against_first"] == {"a": "same", "b": "lower", "c": "higher"}


def test_ab_says_same_where_the_rounds_overlap_and_no_interval_from_one_round() -> None:
    from lab.step.fused.ab import _row, summary

    noisy = summary({"a": [[1.0], [1.2], [0.9], [1.1]], "b": [[1.1], [0.95], [1.15], [1.0]]})
    assert noisy["against_first"]["b"] == "same"
    one = summary({"a": [[1.0]], "b": [[0.5]]})
    assert one["ratio"]["b"] == 0.5 and one["ratio_interval"]["b"] is None and one["against_first"]["b"] == "unknown"
    assert "no interval" in _row(one, "b") and "0.500x" in _row(one, "b") and _row(one, "a").rstrip().endswith("a")


def test_ab_judges_an_arm_against_a_second_plan_of_the_first_and_builds_the_arms_in_a_rotated_order() -> None:
    """The A/A (`FIRST (again)`, added last): an arm is faster or slower only beyond 1 and the A/A's interval. As on an
    H100 at 124M bf16, a second plan of the table 0.976x the first: an arm at 0.980x is the same, one at 0.95x faster;
    one at 1.03x slower. Without an A/A the verdict is against 1 alone, as before."""
    from lab.step.fused.ab import CONTROL, Arm, _row, build_order, summary, with_control

    arms = with_control([Arm("table"), Arm("attention.BS=128")])
    assert [a.label for a in arms] == ["table", "attention.BS=128", "table" + CONTROL]
    assert arms[2].configs == arms[0].configs and arms[2].switches == arms[0].switches
    assert build_order(["a", "b", "c"], 0) == ["a", "b", "c"] and build_order(["a", "b", "c"], 4) == ["b", "c", "a"]

    def rounds(ratio: float) -> list[list[float]]:
        return [[ratio * (0.2 + 0.0001 * r)] for r in range(6)]

    times = {"table": rounds(1.0), "close": rounds(0.980), "far": rounds(0.95), "up": rounds(1.03),
             "table" + CONTROL: rounds(0.976)}
    out = summary(times)
    assert out["against_first"]["close"] == "lower"  # against 1 alone it would be faster
    assert out["against_control"] == {"table": "same", "close": "same", "far": "lower", "up": "higher",
                                      "table" + CONTROL: "same"}
    assert "same" in _row(out, "close") and "faster" in _row(out, "far") and "slower" in _row(out, "up")
    assert "A/A" in _row(out, "table" + CONTROL)
    bare = summary({k: v for k, v in times.items() if not k.endswith(CONTROL)})
    assert "against_control" not in bare and "faster" in _row(bare, "close")


def test_ab_refuses_a_bad_arm_in_one_line_before_anything_runs(capsys) -> None:
    from lab.step.fused import ab

    assert ab.main(["--size", "gpt2-124M", "table", "lnfc.BN=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "arm 'lnfc.BN=4': no kernel 'lnfc'" in err
    assert ab.main(["table", "table"]) == 2 and "an arm is given twice" in capsys.readouterr().err
    assert ab.main(["table", "table (again)"]) == 2 and "is not KERNEL.FIELD" in capsys.readouterr().err  # the A/A's
    assert ab.main(["--rounds", "0", "table"]) == 2 and "must be positive" in capsys.readouterr().err


def test_ab_over_processes_judges_each_arm_by_whether_it_holds_from_process_to_process(monkeypatch, capsys) -> None:
    import json

    from lab.step.fused import ab

    # three fresh processes: within its own rounds each calls "b" faster or slower by a margin that moves from one to
    # the next (as one arm did between machines on the H200), and "c" faster in all three
    per_process = [(0.995, 0.990), (1.004, 0.991), (0.999, 0.989)]
    calls: list[list[str]] = []

    def child(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        b, c = per_process[len(calls) - 1]
        rounds = {"table": [1.0 + 0.0001 * r for r in range(6)]}
        rounds["lm_head.BK=128"] = [b * x for x in rounds["table"]]
        rounds["argmax.num_warps=4"] = [c * x for x in rounds["table"]]
        # the record a process prints: its own summary of its rounds (ab.summary), as main writes it
        record = {"size": "gpt2-1.5B", "dtype": "float32", "batch": 1, "pdl": True,
                  **ab.summary({k: [[v] for v in vs] for k, vs in rounds.items()})}
        return 0, "NVIDIA H200, gpt2-1.5B float32 batch 1, ..., 6 rotated rounds:\n  ...\nAB " + json.dumps(record), ""

    monkeypatch.setattr(ab, "_child", child)
    argv = ["--size", "gpt2-1.5B", "--dtype", "float32", "--rounds", "6", "--processes", "3", "table",
            "lm_head.BK=128", "argmax.num_warps=4"]
    assert ab.main(argv) == 0
    out = capsys.readouterr().out
    # each process ran the same A/B alone (not asked for more processes), one after another
    assert len(calls) == 3 and all("--processes" not in c and c[-3:] == argv[-3:] for c in calls)
    assert [c[:2] for c in calls] == [["--shift", "0"], ["--shift", "1"], ["--shift", "2"]]  # each its build order
    assert all("--no-control" not in c for c in calls)
    assert "process 2 of 3: lm_head.BK=128 1.004x, argmax.num_warps=4 0.991x" in out
    record = json.loads(next(x for x in out.splitlines() if x.startswith("AB "))[3:])
    assert record["against_first"] == {"table": "same", "lm_head.BK=128": "same", "argmax.num_warps=4": "lower"}
    assert [round(r, 3) for r in record["process_ratios"]["lm_head.BK=128"]] == [0.995, 1.004, 0.999]
    assert len(record["processes"]) == 3 and len(record["processes"][0]["rounds_ms"]["table"]) == 6
    # each process's own record, as it came, before the pooled one
    own = [json.loads(x[len("AB-PROCESS "):]) for x in out.splitlines() if x.startswith("AB-PROCESS ")]
    assert [r["rounds_ms"] for r in own] == [r["rounds_ms"] for r in record["processes"]]
    row = next(x for x in out.splitlines() if x.rstrip().endswith("1.004x, 0.999x)"))
    assert "same" in row and "lm_head.BK=128" in row and "in each of 3 processes" in out

    # a process that fails ends the A/B with its own last line and status, nothing pooled, what ended before it kept
    calls.clear()
    monkeypatch.setattr(ab, "_child", lambda argv: child(argv) if not calls else
                        (2, "", "lab.step.fused.ab needs a CUDA device (none visible)\n"))
    assert ab.main(argv) == 2
    captured = capsys.readouterr()
    assert "process 2 of 3 ended with status 2: lab.step.fused.ab needs a CUDA device" in captured.err
    assert not [x for x in captured.out.splitlines() if x.startswith("AB ")]
    assert len([x for x in captured.out.splitlines() if x.startswith("AB-PROCESS ")]) == 1
    assert ab.main(["--processes", "0", "table"]) == 2 and "--processes must be positive" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the A/B tool's refusal on a host without CUDA")
def test_ab_needs_cuda(capsys) -> None:
    from lab.step.fused import ab

    assert ab.main(["table"]) == 2 and "needs a CUDA device" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the tuner's refusal on a host without CUDA")
def test_tuner_needs_cuda_and_names_the_sizes_it_tunes(capsys) -> None:
    from lab.step.fused import tune as T

    assert T.main(["--size", "gpt2-1.5B", "--batch", "1"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        T.main(["--size", "gpt2-2B"])
    assert exc.value.code == 2 and "gpt2-1.5B" in capsys.readouterr().err


@needs_triton
@pytest.mark.parametrize("batch,prefetch,path,launches", [
    (1, False, "gemv", 12), (4, False, "gemv", 12), (8, False, "gemm", 22), (64, False, "gemm", 22),
    (1, True, "gemv-prefetch", 12), (8, True, "gemm", 22)])
def test_the_rule_picks_the_path_at_each_batch(tiny_fp32, batch: int, prefetch: bool, path: str,
                                               launches: int) -> None:
    from lab.step.decode import new_state
    from lab.step.fused.step import LibraryCall, prepare

    plan = prepare(new_state(tiny_fp32, batch, 16), tiny_fp32, sms=2, prefetch=prefetch)
    assert (plan.path, plan.prefetch, len(plan.launches)) == (path, path == "gemv-prefetch", launches), plan.path_reason
    gemms = [x.name for x in plan.launches if isinstance(x, LibraryCall)]
    assert gemms == (["qkv_gemm", "proj_gemm", "fc_gemm", "fc2_gemm"] * 2 + ["lm_head_gemm"] if path == "gemm" else [])
    assert str(batch) in plan.path_reason and ("prefetch" in plan.path_reason) == prefetch


@needs_triton
def test_prefetch_is_declined_where_a_row_tile_would_not_cover_the_batch(tiny_fp32) -> None:
    from lab.step.decode import new_state
    from lab.step.fused.step import prepare

    one_row = {"proj": C.GemvConfig(1, 4, 64)}  # one batch row a program: each slice read 4 times at batch 4
    plan = prepare(new_state(tiny_fp32, 4, 16), tiny_fp32, sms=2, prefetch=True, overrides=one_row)
    assert (plan.path, plan.prefetch) == ("gemv", False) and "read 4 times" in plan.path_reason, plan.path_reason
    assert not any(x.meta.get("PREFETCH") for x in plan.launches)
    forced = prepare(new_state(tiny_fp32, 4, 16), tiny_fp32, sms=2, prefetch=True, overrides=one_row, path="gemv")
    assert forced.prefetch and any(x.meta.get("PREFETCH") for x in forced.launches)
    with pytest.raises(ValueError, match="no PREFETCH kernels"):
        prepare(new_state(tiny_fp32, 8, 16), tiny_fp32, sms=2, prefetch=True, path="gemm")


@needs_triton
@pytest.mark.parametrize("batch,pdl,prefetch,path", [(1, False, False, "gemv"), (8, False, False, "gemm"),
                                                     (8, True, True, "gemm")])
def test_a_built_fused_method_says_its_path(tiny_fp32, batch: int, pdl: bool, prefetch: bool, path: str) -> None:
    """StepMethod.path: what the experiments record. The row is the fused one without its graph (no CUDA
    here), and without PDL's device check; nothing is run but the eager prefill."""
    from lab.contract.names import Method
    from lab.step import methods as SM
    from lab.step.fused.check import prompt_for

    row = SM.MethodSpec(Method.FUSED, bind=SM._fused(prefetch=prefetch), needs=("triton",))
    m = SM.build(row, tiny_fp32, prompt_for(batch, 4, 512), max_len=16)
    assert m.path == path
    assert SM.build(SM.Method.EAGER, tiny_fp32, prompt_for(batch, 4, 512), max_len=16).path is None


def test_rule_declares_every_dtype_with_a_reason() -> None:
    from lab.step.fused import rule as R

    for dtype in ("float32", "bfloat16", "float16"):
        assert R.projection_path(1, 768, dtype).path == R.Path.GEMV
        assert R.projection_path(64, 1600, "torch." + dtype).path == R.Path.GEMM
        t = next(t for t in R.THRESHOLDS if t.dtype == dtype)
        assert R.projection_path(t.gemm_from_batch - 1, 768, dtype).path == R.Path.GEMV and len(t.reason) > 20
    assert R.choose(64, 768, "float32", True, {"ln_qkv": 1}).path == R.Path.GEMM
    assert R.choose(2, 768, "float32", True, {"ln_qkv": 2, "proj": 2}).path == R.Path.GEMV_PREFETCH
    assert R.choose(2, 768, "float32", True, {"ln_qkv": 2, "proj": 1}).path == R.Path.GEMV


# ------------------------------------------------------------------ ahead-of-time compile for sm_90 (no GPU)

AOT_LABELS = {  # label -> (dtype, batch, pdl, prefetch, the path the rule must give, fold: None as on a device)
    "fp32-b1-pdl": (torch.float32, 1, True, False, "gemv", None),
    "bf16-b3": (torch.bfloat16, 3, False, False, "gemv", None),
    "bf16-b1-pdl-prefetch": (torch.bfloat16, 1, True, True, "gemv-prefetch", None),
    "bf16-b1-pdl-prefetch-five": (torch.bfloat16, 1, True, True, "gemv-prefetch", False),
    "fp32-b64-pdl": (torch.float32, 64, True, False, "gemm", None),
    "bf16-b8-pdl-prefetch": (torch.bfloat16, 8, True, True, "gemm", None),
}
GEMM_KERNELS = {"add_ln", "attention", "combine", "gelu", "block_argmax", "argmax"}
WIDE_LOADS = {"ln_qkv", "attention", "proj", "ln_fc", "fc2", "lm_head", "add_ln", "gelu"}  # weights, cache, rows
_COMPILED: dict[str, list[dict]] = {}


def compiled_for_hopper(label: str) -> list[dict]:
    """Every Triton kernel of a GPT-2 124M plan compiled for sm_90 by Triton and its bundled ptxas (no GPU)."""
    from dataclasses import asdict

    from lab.step.fused.aot import compile_plan, plan_for_shapes, ptxas_path

    if ptxas_path() is None:
        pytest.skip("the installed Triton has no bundled ptxas")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 in this process: the kernels are the interpreter's, not compilable")
    if label not in _COMPILED:
        dtype, batch, pdl, prefetch, path, fold = AOT_LABELS[label]
        plan = plan_for_shapes("gpt2", dtype, batch, pdl=pdl, prefetch=prefetch, fold=fold)
        assert plan.path == path, plan.path_reason
        assert plan.fold == (pdl and path != "gemm" and fold is None), plan.path_reason  # PDL's gemv plans fold
        _COMPILED[label] = [asdict(c) for c in compile_plan(plan)]
    return _COMPILED[label]


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("label", list(AOT_LABELS))
def test_kernels_compile_for_hopper(label: str) -> None:
    kernels = compiled_for_hopper(label)
    _, _, pdl, _, path, fold = AOT_LABELS[label]
    gemm, folded = path == "gemm", pdl and path != "gemm" and fold is None
    names = GEMM_KERNELS if gemm else set(C.KERNEL_NAMES) - ({"attention"} if folded else set())
    assert sorted({k["name"] for k in kernels}) == sorted(names)
    assert len(kernels) == len(names) + 1  # + the embedding variant of add_ln / ln_qkv
    for k in kernels:
        # the folded ln_qkv counts its program in for its head: one atomic, one thread's (no other kernel has one)
        assert (k["atomics"], k["unpredicated_atomics"]) == ((1, 0) if folded and k["name"] == "ln_qkv" else (0, 0)), k
        assert k["registers"] is not None and k["registers"] <= 255 and k["spill_bytes"] == 0, k
        assert k["tensor_core_ops"] == 0, k  # plain fp32 FMA: no tf32, no mma (the gemm path's GEMMs are cuBLAS's)
        assert k["grid_dependency_ops"] == (2 if "pdl" in label else 0), k
        if k["name"] in WIDE_LOADS:
            assert k["vector_loads"] > 0, k  # 16-byte loads of the weights / cache / rows
        # the SASS path after a PDL wait and its loads a round trip late (aot.late_loads): the PREFETCH ln_fc reads its
        # row and nothing else, in one trip
        assert (k["late_loads_after_wait"] is None) == (k["post_wait_instructions"] is None), k
        if "prefetch" in label and path != "gemm" and k["name"] == "ln_fc":
            assert k["late_loads_after_wait"] == 0, k
        # the launch's grid and warps (what the issue floor after the wait multiplies), and which paths loop: lm_head's
        # over its chunks (so it has no floor), not the PREFETCH ln_fc's and fc2's
        assert k["programs"] >= 1 and k["warps"] in (1, 2, 4, 8, 16), k
        if k["name"] == "lm_head" and k["post_wait_instructions"] is not None:
            assert k["loops_after_wait"], k
        if "prefetch" in label and path != "gemm" and k["name"] in ("ln_fc", "fc2"):  # (proj unfolded loops over splits)
            assert not k["loops_after_wait"], k


@needs_triton
@pytest.mark.slow
def test_a_bf16_slice_is_not_held_both_packed_and_widened() -> None:
    """GPT-2 1.5B's bf16 ln_fc as fused-pdl-prefetch binds it (BN 8 x BK 2048, 4 warps: 128 bf16 values a thread, 64
    registers packed): widened whole, the fp32 copy (128 more) stayed live beside the packed one (244 registers, two
    programs an SM); read as packed pairs (projections._dot_slice, as it took even and odd columns before) it is widened
    as it is used."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    big = SHAPES["gpt2-1.5B"]
    plan = aot.plan_for_shapes(ModelSpec("one-layer", 1, big.n_embd, big.n_head), torch.bfloat16, 1, pdl=True,
                               prefetch=True)
    g = plan.configs["ln_fc"]
    values = g.BB * g.BN * g.BK // (32 * g.num_warps)  # of the slice, a thread
    [compiled] = aot.compile_plan(replace(plan, launches=[x for x in plan.launches if x.name == "ln_fc"]))
    assert values == 128 and compiled.spill_bytes == 0, (g, compiled)
    assert compiled.registers is not None and compiled.registers < values + values // 2, (g, compiled)


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size, dtype", [("gpt2-124M", torch.bfloat16), ("gpt2-1.5B", torch.float32)])
def test_the_folded_attention_loads_q_k_and_v_first_and_kv_l2_asks_l2_for_them_before_the_wait(
        size: str, dtype: torch.dtype) -> None:
    """attention._fold_attention: a head's last program, once counted in, loads q, K and V first, on the chain of every
    layer. It used to reload the position first (a 64-bit load, one L2 round trip before K and V could be asked for)
    and to start the softmax's running max and sum as reductions of constant tiles (five CTA barriers through shared
    memory, which ptxas does not fold: 17 barriers in the tail against 12 now, at both shapes). Now one barrier stands
    between the count-in and those loads: the one after the counter is zeroed. With KV_L2 the heads' first q programs
    ask L2 for K and V (one prefetch each, batch 1) before their PDL wait; by default nothing is prefetched. With
    Stage.ATTEND left out (a timing arm of the A/B tool) the last program only zeroes the counter: no load, no
    attention after the count-in; with Stage.FENCE also, the count-in has no fence."""
    import re
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot
    from lab.step.fused.stages import Stage

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True, prefetch=True)
    [qkv] = [x for x in plan.launches if x.name == "ln_qkv" and not x.meta.get("EMBED")]
    assert qkv.meta["FOLD"] and qkv.meta.get("KV_L2", False) == C.kv_l2(str(dtype), spec.n_embd), qkv.meta
    qkv = replace(qkv, meta={k: v for k, v in qkv.meta.items() if k != "KV_L2"})  # the build without it
    kernel = aot.compile_launch(qkv)
    sass = {0: aot.sass(kernel.asm["cubin"])}  # by LEAVE_OUT: the step's build, then the two timing builds
    tail = aot.fold_tail(sass[0])
    if tail is None:
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    assert not any(re.search(r"\bLDG\.E\.64\b", x) for x in tail), "the position is loaded again after the count-in"
    loads = [i for i, x in enumerate(tail) if re.search(r"\bLDG\b", x)]
    assert len(loads) >= 3 and aot._barriers(tail[:loads[2]]) == 1, tail[:loads[2] + 1]  # q, then K and V
    for leave_out in (int(Stage.ATTEND), int(Stage.ATTEND | Stage.FENCE)):
        sass[leave_out] = aot.sass(aot.compile_launch(replace(qkv, meta={**qkv.meta, "LEAVE_OUT": leave_out}))
                                   .asm["cubin"])
    bare = aot.fold_tail(sass[int(Stage.ATTEND)])
    assert bare is not None and not any(re.search(r"\bLDG\b", x) for x in bare) and len(bare) < len(tail) // 10, bare
    # Stage.FENCE with it (timing only): the count-in's atomic relaxed, no GPU-scope fence before it, no L1 invalidated
    # after; the step's build and ATTEND's count in with the fence and the acquire
    for leave_out, fenced in ((0, True), (int(Stage.ATTEND), True), (int(Stage.ATTEND | Stage.FENCE), False)):
        code = aot._instructions(sass[leave_out] or "")
        atom = next(i for i, x in enumerate(code) if "ATOMG.E.ADD" in x)
        assert any("MEMBAR" in x and "GPU" in x for x in code[max(0, atom - 4):atom]) == fenced, code[atom - 4:atom + 2]
        assert any("CCTL.IVALL" in x for x in code[atom:atom + 3]) == fenced, code[atom:atom + 3]
    ptx = {kv: aot.compile_launch(replace(qkv, meta={**qkv.meta, "KV_L2": kv})).asm["ptx"] if kv else kernel.asm["ptx"]
           for kv in (0, 1)}
    assert "cp.async.bulk.prefetch.L2" not in ptx[0]
    before, wait, after = ptx[1].partition("griddepcontrol.wait")
    assert wait and before.count("cp.async.bulk.prefetch.L2") == 2 and "cp.async.bulk.prefetch.L2" not in after


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size, dtype", [("gpt2-124M", torch.bfloat16), ("gpt2-1.5B", torch.bfloat16),
                                         ("gpt2-1.5B", torch.float32)])
def test_older_first_leaves_the_new_slot_alone_after_the_last_count_in_and_keeps_ln_qkvs_waves(
        size: str, dtype: torch.dtype) -> None:
    """attention._fold_attention's OLDER_FIRST, compiled for sm_90 as an A/B arm binds it on the table's plan: no spill,
    PDL's two griddepcontrol instructions, three count-in atomics (the q programs' own, then the head's, from the last q
    program and from the K and V programs), as many of ln_qkv's programs an SM as the step's build (its waves
    unchanged), and after the head's last count-in only the new slot's step: a few hundred instructions at most, where
    the step's build runs the whole softmax over the reached slots (about 900 instructions and 12 barriers here). From
    memory (OLDER_FIRST=1): one round trip (every load before the first exchange between threads), one sum over the
    head's width (three CTA barriers), every count-in behind a GPU-scope fence. In words (2): only the q programs'
    count-in fenced, the head's two relaxed."""
    import re
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True, prefetch=True)
    [launch] = [x for x in plan.launches if x.name == "ln_qkv" and not x.meta.get("EMBED")]
    assert launch.meta["FOLD"] and "OLDER_FIRST" not in launch.meta, launch.meta  # off unless bound
    built = {on: replace(launch, meta={**launch.meta, "OLDER_FIRST": on}) for on in (0, 1, 2)}
    got = {on: aot.compile_plan(replace(plan, launches=[x]))[0] for on, x in built.items()}
    table = got[0]
    assert table.atomics == 1, table
    for on in (1, 2):
        k = got[on]
        assert k.registers is not None and k.registers <= 255 and k.spill_bytes == 0, k
        assert k.grid_dependency_ops == 2 and k.atomics == 3 and aot.resident(k) == aot.resident(table), (table, k)
    if any(k.tail_instructions is None for k in got.values()):
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    assert table.tail_instructions is not None and table.tail_instructions > 800 and table.tail_barriers == 12, table
    memory, words = got[1], got[2]
    assert memory.tail_instructions is not None and memory.tail_instructions < 200, memory
    assert memory.tail_barriers == 3 and memory.tail_late_loads == 0, memory
    assert words.tail_instructions is not None and words.tail_instructions < 200, words
    codes = {on: aot.sass(aot.compile_launch(x).asm["cubin"]) or "" for on, x in built.items()}
    fences = {on: len(re.findall(r"\bMEMBAR\S*GPU", code)) for on, code in codes.items()}
    assert fences == {0: 1, 1: 3, 2: 1}, fences
    # the words' polling loop, left on one value the whole program shares (the flags' reduction): one per batch row
    assert {on: aot.polls_as_one(code) for on, code in codes.items()} == {0: [], 1: [], 2: [True]}


POLL = """\
        /*0100*/                   LDG.E.64.STRONG.SYS R12, desc[UR12][R6.64] ;
        /*0110*/                   LDG.E.64.STRONG.SYS R20, desc[UR12][R10.64+0xc800] ;
.L_x_29:
        /*0120*/                   LOP3.LUT R3, R17, R15, R13, 0x80, !PT ;
        /*0130*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0140*/                   REDUX.MIN.S32 UR4, R3 ;
        /*0150*/                   @P1 STS [R0], R5 ;
        /*0160*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0170*/                   LDS R4, [UR4] ;
        /*0180*/                   {SET}
        /*0190*/                   @!P5 LDG.E.64.STRONG.SYS R12, desc[UR12][R6.64] ;
        /*01a0*/                   @!P5 LDG.E.64.STRONG.SYS R20, desc[UR12][R10.64+0xc800] ;
        /*01b0*/                   @!P5 BRA `(.L_x_29) ;
.L_x_30:
        /*01c0*/                   LDG.E R2, desc[UR12][R8.64] ;
        /*01d0*/                   @P0 BRA `(.L_x_30) ;
        /*01e0*/                   EXIT ;
"""


def test_polls_as_one_tells_a_loop_left_on_a_shared_value_from_one_left_on_each_threads_own_load() -> None:
    """aot.polls_as_one over disassembly: a polling loop (strong loads, a branch back) whose predicate comes from a
    shared-memory load alone is left by the program's threads together; one whose predicate also takes a thread's own
    global load (the words' flags before attention._unflagged: `& ((wm & wl) >> 32)` outside the reduction) is not.
    A loop with no strong load is not a polling loop."""
    from lab.step.fused import aot

    shared = POLL.replace("{SET}", "ISETP.NE.U32.AND P5, PT, R4, RZ, PT ;")
    own = POLL.replace("{SET}", "LOP3.LUT P5, RZ, R4, R21, R23, 0x80, !PT ;")
    assert aot.polls_as_one(shared) == [True]
    assert aot.polls_as_one(own) == [False]
    assert aot.polls_as_one(POLL.replace("STRONG.SYS", "E.64")) == []  # (no strong load: not polling)
    assert aot.polls_as_one(None) is None


def test_late_loads_counts_the_loads_a_tail_issues_after_its_first_exchange_between_threads() -> None:
    """aot.late_loads over disassembly lines: loads before the first shuffle or CTA barrier that follows the first load
    are one round trip; each one after it starts another."""
    from lab.step.fused import aot

    one = ["LDG.E.128 R4, [R2]", "LDG.E.128 R8, [R2+0x10]", "FFMA R1, R4, R8, R1", "SHFL.BFLY PT, R3, R1, 0x10, 0x1f",
           "BAR.SYNC.DEFER_BLOCKING 0x0", "STG.E [R6], R1", "EXIT"]
    assert aot.late_loads(one) == 0
    two = one[:3] + ["SHFL.BFLY PT, R3, R1, 0x10, 0x1f", "@P0 LDG.E.128.STRONG.GPU R12, [R2+0x20]",
                     "BAR.SYNC.DEFER_BLOCKING 0x0", "LDG.E R13, [R9]", "EXIT"]
    assert aot.late_loads(two) == 2
    assert aot.late_loads(["BAR.SYNC.DEFER_BLOCKING 0x0", "LDG.E R1, [R2]", "FFMA R1, R1, R1, R1", "EXIT"]) == 0
    assert aot.late_loads(["MOV R1, RZ", "EXIT"]) == 0  # no load


def test_issue_after_wait_prices_every_programs_path_and_the_fold_tails_over_the_sms_schedulers() -> None:
    """aot.issue_after_wait_us: warps x (programs x the path after the wait + tail programs x the tail) warp
    instructions, issued four a cycle an SM; nothing where there is no wait or the path loops (counted once, it is not
    what runs)."""
    from dataclasses import replace

    from lab.step.fused import aot

    c = aot.Compiled("ln_qkv", "", 90, 0, 0, 0, 0, 2, post_wait_instructions=500, tail_instructions=900, programs=100,
                     warps=4, tail_programs=12)
    cycles = 4 * (100 * 500 + 12 * 900) / (132 * 4)
    assert aot.issue_after_wait_us(c, 132, 1980.0) == pytest.approx(cycles / 1980.0, rel=1e-12)
    assert aot.issue_after_wait_us(c, 66, 1980.0) == pytest.approx(2 * cycles / 1980.0, rel=1e-12)  # half the SMs
    assert aot.issue_after_wait_us(replace(c, loops_after_wait=True), 132, 1980.0) is None
    assert aot.issue_after_wait_us(replace(c, post_wait_instructions=None), 132, 1980.0) is None


def test_resident_programs_follow_registers_in_warp_units_shared_memory_and_the_sms_limits() -> None:
    """aot.resident and aot.waves (sm_90's occupancy rules): GPT-2 1.5B's ln_qkv at 4 warps holds two programs an SM at
    192 registers a thread, three at 164 and 168, four at 126 (rounded up to 128 in a warp's unit of 256), five at 96,
    and 600 programs over 132 SMs are 2.27 waves at two an SM; shared memory, warps and the 32-program limit bound too."""
    from dataclasses import replace

    from lab.step.fused import aot

    c = aot.Compiled("ln_qkv", "", 192, 0, 1024, 0, 0, 2, programs=600, warps=4)
    assert [aot.resident(replace(c, registers=r)) for r in (192, 168, 164, 126, 128, 96, 104)] == [2, 3, 3, 4, 4, 5, 4]
    assert aot.waves(c, 132) == pytest.approx(600 / 264, rel=1e-12)
    assert aot.resident(replace(c, registers=32, shared_bytes=100 * 1024)) == 2  # (100 + 1) KB a program of 228 KB
    assert aot.resident(replace(c, registers=32, warps=16)) == 4  # 64 warps an SM
    assert aot.resident(replace(c, registers=16, warps=1, shared_bytes=0)) == 32  # 32 programs an SM
    assert aot.resident(replace(c, registers=None)) is None and aot.waves(replace(c, programs=0), 132) is None


def test_loops_after_wait_finds_a_branch_back_between_the_wait_and_the_exit() -> None:
    from lab.step.fused import aot

    head = ["        /*0000*/ MOV R1, c[0x0][0x28] ;", ".L_x_0:", "        /*0010*/ ACQBULK ;"]
    back = head + [".L_x_1:", "        /*0020*/ FFMA R2, R3, R4, R2 ;", "        /*0030*/ @P0 BRA `(.L_x_1) ;",
                   "        /*0040*/ EXIT ;"]
    forward = head + ["        /*0020*/ @P0 BRA `(.L_x_2) ;", "        /*0030*/ FFMA R2, R3, R4, R2 ;", ".L_x_2:",
                      "        /*0040*/ EXIT ;", ".L_x_3:", "        /*0050*/ BRA `(.L_x_3);"]
    assert aot.loops_after_wait("\n".join(back))
    assert not aot.loops_after_wait("\n".join(forward))  # forward only; the trap loop after EXIT does not count
    assert not aot.loops_after_wait("\n".join(back).replace("ACQBULK", "NOP")) and not aot.loops_after_wait(None)


@needs_triton
def test_aot_binds_a_switch_by_name_and_refuses_one_no_launch_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m lab.step.fused.aot --switch KERNEL:SWITCH=V`: a malformed one is argparse's usage error, one that no
    launch of the plan takes one line naming it; both exit 2 before anything is compiled."""
    from lab.step.fused import aot

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("lab.step.fused.aot refuses to run under Triton's interpreter")
    with pytest.raises(SystemExit) as bad:
        aot.main(["--switch", "ln_qkv:KV_AT_ONCE"])
    assert bad.value.code == 2 and "expected KERNEL:SWITCH=V" in capsys.readouterr().err
    # (a GPT-2 size by name: two layers of its shapes)
    assert aot.main(["--model", "gpt2-124M", "--dtype", "float32", "--batch", "1", "--switch", "ln_qkv:NOPE=1"]) == 2
    assert capsys.readouterr().err.strip() == "--switch: no launch of this plan takes ln_qkv:NOPE"


def _switch_builds(size: str, dtype: torch.dtype, kernel: str, switch: str, tail: bool = False) -> dict[int, list[str]]:
    """`kernel`'s launch in GPT-2 `size`'s fused-pdl-prefetch plan at batch 1 (not layer 0's embedding variant), compiled
    for sm_90 with the compile-time `switch` off (0) and on (1): the SASS path after its PDL wait, or with `tail` the
    fold tail (aot.fold_tail). Skips without the Triton wheel's ptxas and nvdisasm; the plan must not bind the switch."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True, prefetch=True)
    [launch] = [x for x in plan.launches if x.name == kernel and not x.meta.get("EMBED")][-1:]
    assert switch not in launch.meta, launch.meta  # off unless bound
    pick = aot.fold_tail if tail else aot.after_wait
    paths = {on: pick(aot.sass(aot.compile_launch(replace(launch, meta={**launch.meta, switch: on})).asm["cubin"]))
             for on in (0, 1)}
    if paths[0] is None or paths[1] is None:
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    return {on: path for on, path in paths.items() if path is not None}


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size, dtype", [("gpt2-124M", torch.bfloat16), ("gpt2-1.5B", torch.float32)])
def test_kv_at_once_issues_the_folded_attentions_v_loads_with_k(size: str, dtype: torch.dtype) -> None:
    """attention._fold_attention's KV_AT_ONCE: without it ptxas issues V's loads after the scores' multiply-adds, which
    wait for K (8 of GPT-2 124M bf16's 18 loads in the tail, 16 of 1.5B fp32's 33: two round trips on the chain of
    every layer); with it, every load of the tail before its first exchange between threads, the same loads."""
    from lab.step.fused import aot

    tails = _switch_builds(size, dtype, "ln_qkv", "KV_AT_ONCE", tail=True)
    loads = {on: sum("LDG" in x for x in t) for on, t in tails.items()}
    assert loads[0] == loads[1], loads  # q, then K and V of a chunk: the same loads
    assert aot.late_loads(tails[0]) > 0, "ptxas now issues V's loads with K's on its own: KV_AT_ONCE has no work left"
    assert aot.late_loads(tails[1]) == 0, [x for x in tails[1] if "LDG" in x or "SHFL" in x][:40]


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size", ["gpt2-124M", "gpt2-1.5B"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sum_once_takes_the_sum_over_k_out_of_lm_heads_loop(size: str, dtype: torch.dtype) -> None:
    """lm_head's SUM_ONCE (projections._ln_gemv) at the tiles its plan takes: without it every chunk of K ends in a sum
    across the threads that hold a row (shuffles, 32 a chunk at GPT-2 1.5B bf16), with it the loop has none and fewer
    instructions (the products accumulate element by element; one sum after the loop), and neither build spills."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES[size]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True, prefetch=True)
    [launch] = [x for x in plan.launches if x.name == "lm_head"]
    assert "SUM_ONCE" not in launch.meta, launch.meta  # off unless bound
    built = {on: aot.compile_plan(replace(plan, launches=[replace(launch, meta={**launch.meta, "SUM_ONCE": on})]))[0]
             for on in (0, 1)}
    if built[0].post_wait_instructions is None:
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    assert built[0].loop_shuffles, "lm_head's loop sums over K without shuffles now: SUM_ONCE has no work left"
    assert built[1].loop_shuffles == 0, built[1]
    assert built[1].loop_instructions is not None and built[0].loop_instructions is not None
    assert built[1].loop_instructions < built[0].loop_instructions, built
    for c in built.values():
        assert c.spill_bytes == 0 and c.registers is not None and c.registers <= 255, c


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_folded_argmax_compiles_for_hopper_with_one_atomic_and_no_spill(dtype: torch.dtype) -> None:
    """lm_head with the argmax folded in (ARGMAX_FOLD), fused-pdl-prefetch's at GPT-2 1.5B, batch 1 (where the fold
    measured faster, docs/fused-step.md item 10): one atomic, one thread's, its count-in; no spill; no argmax launch."""
    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES["gpt2-1.5B"]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), dtype, 1, pdl=True, prefetch=True,
                               argmax_fold=True)
    assert plan.argmax_fold and "argmax" not in [x.name for x in plan.launches]
    [head] = [c for c in aot.compile_plan(plan) if c.name == "lm_head"]
    assert (head.atomics, head.unpredicated_atomics) == (1, 0), head
    assert head.spill_bytes == 0 and head.registers is not None and head.registers <= 255, head


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size", ["gpt2-124M", "gpt2-1.5B"])
def test_pos_at_once_issues_the_bf16_position_with_ln_qkvs_row(size: str) -> None:
    """ln_qkv's POS_AT_ONCE (projections._ln_qkv), bf16 as fused-pdl-prefetch binds it at batch 1: without it ptxas
    issues the position's load (where the K and V rows are stored) after the layer norm's statistics, a second round
    trip before the stores and the fold's count-in; with it, with the row's."""
    from lab.step.fused import aot

    paths = _switch_builds(size, torch.bfloat16, "ln_qkv", "POS_AT_ONCE")
    late = [x for x in paths[0][next(i for i, x in enumerate(paths[0]) if "SHFL" in x):] if "LDG" in x]
    assert len(late) == 1 and "LDG.E.64" in late[0], late  # the position (int64), after the statistics' shuffles
    assert aot.late_loads(paths[1]) == 0, [x for x in paths[1] if "LDG" in x or "SHFL" in x][:20]


@needs_triton
def test_pieces_split_a_row_into_powers_of_two_and_hold_the_third_flat_only_where_it_fits() -> None:
    """projections._piece: the largest power of two, the largest in what is left, the rest rounded up (masked past the
    row); projections._flat: the third piece end to end over the program's rows only where they fit the second's
    width and it is a whole number of groups of four."""
    from lab.step.fused.projections import _flat, _piece

    widths = {K: [_piece(K, i) for i in range(3)] for K in (768, 1600, 3072, 6400, 64, 45, 52, 50)}
    assert widths == {768: [512, 256, 0], 1600: [1024, 512, 64], 3072: [2048, 1024, 0], 6400: [4096, 2048, 256],
                      64: [64, 0, 0], 45: [32, 8, 8], 52: [32, 16, 4], 50: [32, 16, 2]}
    assert [_flat(8, 512, 64), _flat(16, 512, 64), _flat(4, 16, 4), _flat(8, 16, 2), _flat(4, 256, 0)] == [
        True, False, True, False, False]


@needs_triton
@pytest.mark.slow
def test_pieces_leaves_no_column_padded_and_fits_a_third_ln_qkv_program_on_an_sm() -> None:
    """ln_qkv's and ln_fc's PIECES (projections._piece) at GPT-2 1.5B fp32, the tables' tiles, sm_90: one tile of the
    row pads 1600 columns to 2048, so each thread holds and multiplies 28% zeros; held as 1024 + 512 + 64 it holds
    fewer registers, no spill, and ln_qkv's 4-warp programs fit three an SM (65,536 registers) where they fit two."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    spec = SHAPES["gpt2-1.5B"]
    plan = aot.plan_for_shapes(ModelSpec("two-layer", 2, spec.n_embd, spec.n_head), torch.float32, 1, pdl=True,
                               prefetch=True)
    for name in ("ln_qkv", "ln_fc"):
        [launch] = [x for x in plan.launches if x.name == name and not x.meta.get("EMBED")][-1:]
        assert "PIECES" not in launch.meta, launch.meta  # off unless bound
        regs, spills = zip(*(aot.ptxas_usage(aot.compile_launch(replace(launch, meta={**launch.meta, "PIECES": on}))
                                             .asm["ptx"]) for on in (0, 1)))
        assert spills == (0, 0) and None not in regs and regs[1] < regs[0], (name, regs, spills)
        if name == "ln_qkv":
            warps = launch.meta["num_warps"]
            assert [65536 // (r * 32 * warps) for r in regs] == [2, 3], regs


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("size", ["gpt2-124M", "gpt2-1.5B"])
def test_res_at_once_issues_the_fp32_residual_with_the_input(size: str) -> None:
    """proj's and fc2's RES_AT_ONCE (projections._res_at_once), fp32 as fused-pdl-prefetch binds them at batch 1: without
    it ptxas issues the residual's load among the reduction's shuffles (a second round trip after the wait, on the
    chain of two launches a layer); with it, every load after the wait before the first exchange between threads."""
    from lab.step.fused import aot

    for name in ("proj", "fc2"):
        paths = _switch_builds(size, torch.float32, name, "RES_AT_ONCE")
        assert aot.late_loads(paths[0]) > 0, (name, "ptxas now issues the residual with the input on its own")
        assert aot.late_loads(paths[1]) == 0, (name, [x for x in paths[1] if "LDG" in x or "SHFL" in x][:20])


@needs_triton
@pytest.mark.slow
def test_bf16_products_take_two_instructions_a_weight_after_the_wait() -> None:
    """GPT-2 1.5B's bf16 fc2 as fused-pdl-prefetch bound it until 2026-12-04 (BN 4 x BK 8192, 4 warps: 256 bf16 values a
    thread; retuned since to BN 2, the same code over half the rows): read as packed pairs and summed in column order,
    each weight costs one integer instruction to widen and one fused multiply-add.

    - Widened by a cast and summed as even and odd columns apart, the path after the PDL wait ran 917 machine
      instructions (3.6 a value): a multiply, a fused multiply-add and an add a pair, two instructions for each high half.
    - Read as pairs of 16-byte vectors (four pairs a thread), 705, with 20 CTA barriers: the input row, loaded four
      columns a thread, went through shared memory to reach the pairs' eight (`projections._load_w_raw`).
    - Read as pairs of 8-byte vectors (two pairs a thread, the input's four columns), 581 and 4 barriers (the reduction
      over 128 threads: two; the residual and the store the rest), under 2.5 instructions a value and 160 registers
      a thread where the conversion's buffers took 254."""
    from dataclasses import replace

    from lab.contract.profiles import SHAPES, ModelSpec
    from lab.step.fused import aot

    if aot.ptxas_path() is None or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs the installed Triton's ptxas and compiled (not interpreted) kernels")
    big = SHAPES["gpt2-1.5B"]
    plan = aot.plan_for_shapes(ModelSpec("one-layer", 1, big.n_embd, big.n_head), torch.bfloat16, 1, pdl=True,
                               prefetch=True)
    [fc2] = [replace(x, meta={**x.meta, "BB": 1, "BN": 4, "num_warps": 4}) for x in plan.launches if x.name == "fc2"]
    g = C.GemvConfig(fc2.meta["BB"], fc2.meta["BN"], fc2.meta["BK"], fc2.meta["num_warps"])
    values = g.BB * g.BN * g.BK // (32 * g.num_warps)
    [compiled] = aot.compile_plan(replace(plan, launches=[fc2]))
    if compiled.post_wait_instructions is None:
        pytest.skip("the installed Triton has no nvdisasm beside its ptxas")
    assert values == 256 and compiled.spill_bytes == 0, (g, compiled)
    assert compiled.post_wait_instructions < 2.5 * values, (g, compiled)
    assert compiled.barriers_after_wait is not None and compiled.barriers_after_wait <= 4, (g, compiled)
    assert compiled.registers is not None and compiled.registers <= 192, (g, compiled)


@needs_triton
@pytest.mark.slow
def test_prefetch_leaves_only_activations_after_the_wait() -> None:
    """What the variant is for: layer norm + FC reads its slice, bias and norm parameters before the PDL
    wait, so after it only the residual row is loaded (from L2); the default build loads weights there. (The
    five-kernel plan: folded, ln_qkv also reads q, K and V after the wait, to attend.)"""
    after = {(k["name"], k["variant"]): k["loads_after_wait"] for k in compiled_for_hopper("bf16-b1-pdl-prefetch-five")}
    default = {(k["name"], k["variant"]): k["loads_after_wait"] for k in compiled_for_hopper("fp32-b1-pdl")}
    cfg = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)
    for name in ("ln_fc", "ln_qkv"):
        g = cfg[name]
        row = C.cdiv(g.BB * g.BK * 4, 16 * 32 * g.num_warps)  # the fp32 residual row in 16-byte loads a thread
        assert after[(name, "")] <= row + (2 if name == "ln_qkv" else 0) < default[(name, "")], (name, g, after, default)


@needs_triton
@pytest.mark.slow
def test_prefetch_kernels_read_nothing_after_their_reduction_begins() -> None:
    """After the wait, a fused-pdl-prefetch GEMV kernel of a layer makes one round trip to L2: every load it makes
    there is issued before the first CTA barrier (a reduction's). proj and fc2 loaded their residual rows only after
    the reduction (two such loads in proj's PTX), a second trip on the chain; they now load them beside the input.
    (Five kernels a layer, proj combines the attention's splits first: loads that depend on a reduction.)"""
    got = {k["name"]: k["loads_after_barrier"] for k in compiled_for_hopper("bf16-b1-pdl-prefetch") if not k["variant"]}
    assert got["proj"] == got["ln_fc"] == got["fc2"] == 0, got
    five = {k["name"]: k["loads_after_barrier"] for k in compiled_for_hopper("bf16-b1-pdl-prefetch-five")
            if not k["variant"]}
    assert five["ln_fc"] == five["fc2"] == 0 < five["proj"], five


# ------------------------------------------------------------------ configs and budget (no Triton)

def test_prefetch_configs_are_one_chunk_within_the_tile_budget(monkeypatch) -> None:
    shapes = C.gemv_shapes(GPT2.n_embd, GPT2.vocab_size)
    for dtype in (torch.float32, torch.bfloat16):
        for batch in (1, 8, 64):
            plain = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, batch, dtype, 132)
            cfg = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, batch, dtype, 132, prefetch=True)
            for name in ("lm_head", "attention", "argmax"):  # TUNED_PREFETCH's where it has them, else the plain step's
                entry = C.TUNED_PREFETCH.get((name, str(dtype).removeprefix("torch."), batch, GPT2.n_embd))
                assert cfg[name] == (type(plain[name])(**entry) if entry else plain[name]), (name, batch, dtype)
            for name in C.PREFETCH_KERNELS:
                g = cfg[name]
                assert g.BK == C.next_pow2(shapes[name][1]), (name, g)
                if (name, str(dtype).removeprefix("torch."), batch, GPT2.n_embd) not in C.TUNED_PREFETCH:  # measured
                    assert g.BB * g.BN * g.BK <= C.weight_tile(dtype.itemsize) * 32 * g.num_warps, (name, g)
    # the slice's budget is registers' bytes: a bf16 program holds twice the values of an fp32 one (GPT-2 1.5B's ln_fc)
    assert C.prefetch_config(C.GemvConfig(1, 16, 512, 4), 1600, elem_bytes=4) == C.GemvConfig(1, 4, 2048, 4)
    assert C.prefetch_config(C.GemvConfig(1, 16, 512, 4), 1600, elem_bytes=2) == C.GemvConfig(1, 8, 2048, 4)
    one = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)
    assert one["ln_fc"] == C.GemvConfig(**C.TUNED_PREFETCH["ln_fc", "bfloat16", 1, 768])
    assert one["attention"] == C.AttentionConfig(**C.TUNED_PREFETCH["attention", "bfloat16", 1, 768])
    monkeypatch.delitem(C.TUNED_PREFETCH, ("ln_fc", "bfloat16", 1, 768))
    one = C.choose(GPT2.n_embd, GPT2.n_head, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)
    assert one["ln_fc"] == C.GemvConfig(1, 8, 1024, 8)  # without its entry: TUNED's BN and warps, BK widened to the row
    wide = C.choose(1600, 25, GPT2.vocab_size, 256, 1, torch.bfloat16, 132, prefetch=True)  # GPT-2 1.5B: its own entries
    assert wide["fc2"] == C.GemvConfig(**C.TUNED_PREFETCH["fc2", "bfloat16", 1, 1600])
    assert wide["lm_head"] == C.GemvConfig(**C.TUNED_PREFETCH["lm_head", "bfloat16", 1, 1600])
    with pytest.raises(ValueError, match="one chunk"):
        C.choose(64, 4, 512, 64, 1, torch.float32, 8, overrides={"fc2": C.GemvConfig(1, 4, 64)}, prefetch=True)
    monkeypatch.setitem(C.TUNED_PREFETCH, ("fc2", "bfloat16", 1, 768), {"BB": 1, "BN": 2, "BK": 1024, "num_warps": 4})
    with pytest.raises(ValueError, match=r"TUNED_PREFETCH\['fc2', 'bfloat16', 1, 768\]: BK must be 4096"):
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
@pytest.mark.parametrize("batch,path", [(1, None), (8, None), (16, None), (64, None), (1, "gemm"), (64, "gemv")],
                         ids=["b1", "b8", "b16", "b64", "b1-gemm", "b64-gemv"])
def test_gpu_fp32_equals_eager_and_replays(gpt2_cuda, batch: int, path: str | None) -> None:
    from lab.step.fused.check import free_running

    run = free_running(gpt2_cuda, batch, steps=12, prompt_len=16, graph=True, path=path)
    assert run["path"] == (path or ("gemv" if batch < 8 else "gemm")), run["path"]
    assert_equal_run(run, FP32_REL_GPU, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,prefetch,kv_l2,at_once", [(1, False, None, 0), (8, False, None, 0), (1, True, None, 0),
                                                          (8, True, None, 0), (3, False, None, 0), (1, True, 0, 0),
                                                          (2, True, 1, 0), (1, True, None, 1), (2, True, None, 1)],
                         ids=["b1", "b8", "b1-prefetch", "b8-prefetch", "b3", "b1-prefetch-kv-l2-off",
                              "b2-prefetch-kv-l2", "b1-prefetch-at-once", "b2-prefetch-at-once"])
def test_gpu_pdl_equals_eager_and_replays(gpt2_cuda, batch: int, prefetch: bool, kv_l2: int | None,
                                          at_once: int) -> None:
    """The PDL methods as the lab runs them (on the gemv path, the attention folded into ln_qkv: FOLD_WITH_PDL):
    eager's tokens, the graph's replay bit for bit; the folded ln_qkv's KV_L2 switch (its heads' K and V asked into L2
    before the wait: a hint, so the same values) as configs.KV_L2_FIRST binds it (on, for GPT-2 124M fp32 on the
    PREFETCH path), or bound off (kv-l2-off) or on (kv-l2: two batch rows a program, the most the PREFETCH path
    takes at GPT-2 124M fp32; at batch 3 the rule declines it) by name; the folded attention's KV_AT_ONCE (K and V of
    a chunk asked for in one round trip), its POS_AT_ONCE (the position asked for with the row) and proj's and fc2's
    RES_AT_ONCE (the residual asked for with the input), the same values, bound by name at one and two batch rows a
    program (at-once)."""
    from lab.step.fused.check import free_running
    from lab.step.fused.step import FOLD_WITH_PDL, pdl_supported

    ok, why = pdl_supported(torch.device("cuda"))
    if not ok:
        pytest.skip(why)
    switches = {"ln_qkv": {**({} if kv_l2 is None else {"KV_L2": kv_l2}),
                           **({"KV_AT_ONCE": 1, "POS_AT_ONCE": 1} if at_once else {})},
                **({"proj": {"RES_AT_ONCE": 1}, "fc2": {"RES_AT_ONCE": 1}} if at_once else {})}
    run = free_running(gpt2_cuda, batch, steps=12, prompt_len=16, graph=True, pdl=True, prefetch=prefetch,
                       switches=switches if switches["ln_qkv"] or at_once else None)
    table = run["path"] == "gemv-prefetch" and C.kv_l2("float32", GPT2.n_embd)
    assert run["kv_l2"] == (table if kv_l2 is None else bool(kv_l2)), run
    # KV_AT_ONCE as the card's table binds it (configs.KV_AT_ONCE_FIRST: on an H100 SXM, at GPT-2 124M fp32), or by name
    card_table = run["path"] == "gemv-prefetch" and C.kv_at_once("float32", GPT2.n_embd, C.device_card("cuda"))
    assert run["card"] == C.device_card("cuda") and run["kv_at_once"] == (bool(at_once) or card_table), run
    assert run["pos_at_once"] == run["res_at_once"] == bool(at_once), run
    assert run["path"] == ("gemm" if batch >= 8 else "gemv-prefetch" if prefetch else "gemv"), run["path"]
    assert run["fold"] == (run["path"] != "gemm" and FOLD_WITH_PDL), run["configs"]  # the gemv paths fold
    assert_equal_run(run, FP32_REL_GPU, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,pdl", [(1, True), (3, False)], ids=["b1-pdl-prefetch", "b3"])
def test_gpu_sum_once_equals_eager_and_replays(gpt2_cuda, gpt2_cuda_bf16, batch: int, pdl: bool) -> None:
    """lm_head's SUM_ONCE (its products summed over K once, after the last chunk), bound by name as an A/B arm binds
    it, on fused-pdl-prefetch at batch 1 and plain fused at batch 3: fp32 eager's tokens and the graph's replay bit for
    bit; bf16 by the teacher-forced rule."""
    _variant_equals_eager(gpt2_cuda, gpt2_cuda_bf16, batch, pdl, "sum_once", switches={"lm_head": {"SUM_ONCE": 1}})


def _variant_equals_eager(gpt2_cuda: Any, gpt2_cuda_bf16: Any, batch: int, pdl: bool, taken: str,
                          **variant: Any) -> None:
    """A variant of a kernel (`variant`: check.free_running's and teacher_forced's keyword arguments for it; `taken`:
    the run's key that says the plan took it), on fused-pdl-prefetch (pdl) or plain fused: fp32 eager's tokens and the
    graph's replay bit for bit; bf16 by the teacher-forced rule."""
    from lab.step.fused.check import free_running, teacher_forced
    from lab.step.fused.step import pdl_supported

    ok, why = pdl_supported(torch.device("cuda"))
    if pdl and not ok:
        pytest.skip(why)
    run = free_running(gpt2_cuda, batch, steps=12, prompt_len=16, graph=True, pdl=pdl, prefetch=pdl, **variant)
    assert run[taken] and run["path"] == ("gemv-prefetch" if pdl else "gemv"), run
    assert run["heads_zero"], run  # a folding plan's counters and words at zero after its steps
    assert_equal_run(run, FP32_REL_GPU, GPT2.n_layer)
    assert run["graph"]["out_equal_direct"] and run["graph"]["logits_identical_direct"], run["graph"]
    r = teacher_forced(gpt2_cuda, gpt2_cuda_bf16, batch, steps=12, prompt_len=16, prefetch=pdl, pdl=pdl, **variant)
    assert r[taken] and all(r["bookkeeping_ok"]), r
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r  # as test_gpu_bf16_teacher_forced


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,head_major,older", [(1, 0, 1), (1, 1, 1), (2, 0, 1), (1, 0, 2), (2, 1, 2)],
                         ids=["b1", "b1-head-major", "b2", "b1-words", "b2-head-major-words"])
def test_gpu_older_first_equals_eager_and_replays(gpt2_cuda, gpt2_cuda_bf16, batch: int, head_major: int,
                                                  older: int) -> None:
    """The folded attention's OLDER_FIRST (the older slots attended by each head's last q program, the new slot added
    by the last count-in: attention._fold_attention), bound by name as an A/B arm binds it, on fused-pdl-prefetch in the
    q-K-V order and head by head, at one and two batch rows a program, handed over through memory (1) or in flagged
    words (2): fp32 eager's tokens and the graph's replay bit for bit (whichever program is last, the sums are the
    same); bf16 by the teacher-forced rule."""
    _variant_equals_eager(gpt2_cuda, gpt2_cuda_bf16, batch, True, "older_first",
                          switches={"ln_qkv": {"OLDER_FIRST": older, "HEAD_MAJOR": head_major}})


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,pdl", [(1, True), (3, False)], ids=["b1-pdl-prefetch", "b3"])
def test_gpu_argmax_fold_equals_eager_and_replays(gpt2_cuda, gpt2_cuda_bf16, batch: int, pdl: bool) -> None:
    """The argmax taken by lm_head's last program (step.prepare's argmax_fold: every program counts itself in, the last
    reads the candidates back through L2), on fused-pdl-prefetch at batch 1 and plain fused at batch 3: fp32 eager's
    tokens, out and position at every step and the graph's replay bit for bit; bf16 by the teacher-forced rule."""
    _variant_equals_eager(gpt2_cuda, gpt2_cuda_bf16, batch, pdl, "argmax_fold", argmax_fold=True)


@pytest.mark.cuda
@needs_triton
@pytest.mark.parametrize("batch,prefetch,pdl", [(1, False, False), (8, False, False), (1, True, False), (64, False, False),
                                               (1, True, True)],
                         ids=["b1", "b8", "b1-prefetch", "b64", "b1-pdl-prefetch"])
def test_gpu_bf16_teacher_forced(gpt2_cuda, gpt2_cuda_bf16, batch: int, prefetch: bool, pdl: bool) -> None:
    """bf16 by the teacher-forced rule; with PDL, fused-pdl-prefetch as the lab runs it (folded: FOLD_WITH_PDL)."""
    from lab.step.fused.check import teacher_forced
    from lab.step.fused.step import FOLD_WITH_PDL, pdl_supported

    ok, why = pdl_supported(torch.device("cuda"))
    if pdl and not ok:
        pytest.skip(why)
    r = teacher_forced(gpt2_cuda, gpt2_cuda_bf16, batch, steps=12, prompt_len=16, prefetch=prefetch, pdl=pdl)
    assert r["path"] == ("gemm" if batch >= 8 else "gemv-prefetch" if prefetch else "gemv"), r["path"]
    assert r["fold"] == (pdl and r["path"] != "gemm" and FOLD_WITH_PDL), r
    assert all(r["bookkeeping_ok"]), r
    # 12 layers of bf16 weights: the absolute error is whatever bf16 gives; the fused step must not add to it
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r
