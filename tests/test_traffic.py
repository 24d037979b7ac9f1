"""lab.step.fused.traffic: each fused launch's bytes per call, summed over a step, are the step's declared bytes."""

from __future__ import annotations

import pytest
import torch

from lab.step import ceilings, decode as D
from lab.step.fused import configs as C, traffic as T
from lab.step.fused import triton_import_error
from lab.step.model import extract_weights

GPT2 = T.Shape(n_layer=12, n_embd=768, n_head=12, vocab=50257, batch=1, elem=4, max_len=256)


@pytest.mark.parametrize("path, fold", [("gemv", False), ("gemv", True), ("gemm", False)])
@pytest.mark.parametrize("batch, position", [(1, 0), (3, 9)])
def test_a_step_reads_every_weight_once_and_the_cache_the_ceilings_count(tiny, path, fold, batch, position) -> None:
    """Summed over a step: the weights are ceilings.step_bytes's weight term less its B wpe rows, plus the one wpe
    row and the B wte rows the embedding gathers; the cache read is its cache term at position + 1 slots (on the
    gemm path, slot `position` comes from the QKV GEMM's output; folded, ln_qkv reads them), the cache written one
    slot a layer."""
    _, w = tiny
    E, elem, L = w.n_embd, w.wte.element_size(), w.n_layer
    step = T.calls(T.Shape.of(w, batch, 24), T.Layout(path, 2, 8, fold=fold), position)
    assert ("attention" in {c.kernel for c in step}) == (not fold)
    weight_term = ceilings.step_bytes(w, batch, 0)
    cache_term = ceilings.step_bytes(w, batch, position + 1) - weight_term
    assert sum(c.weights for c in step) == weight_term - batch * E * elem + E * elem + batch * E * elem
    fresh = 2 * L * batch * E * elem if path == "gemm" else 0
    assert sum(c.kv_read for c in step) == cache_term - fresh
    assert sum(c.kv_write for c in step) == 2 * L * batch * E * elem
    assert all(c.act_in > 0 and c.act_out > 0 for c in step)  # every launch reads and writes an activation


def test_bf16_halves_the_weights_and_the_cache_not_the_fp32_activations() -> None:
    fp32 = T.calls(GPT2, T.Layout("gemv", 4, 786), 64)
    bf16 = T.calls(T.Shape(**{**GPT2.__dict__, "elem": 2}), T.Layout("gemv", 4, 786), 64)
    for a, b in zip(fp32, bf16):
        assert (b.weights * 2, b.kv_read * 2, b.kv_write * 2) == (a.weights, a.kv_read, a.kv_write), a.kernel
    ln_fc = next(i for i, c in enumerate(fp32) if c.kernel == "ln_fc")
    assert bf16[ln_fc].act_out == fp32[ln_fc].act_out  # h stays fp32 on the gemv path
    lm = -2
    assert bf16[lm].act_out < fp32[lm].act_out  # the logits are in the weights' dtype


@pytest.mark.parametrize("elem", [4, 2])
def test_the_prefetch_path_reads_the_folded_layer_norm_constants_for_its_shift_and_bias(elem: int) -> None:
    """Where the PREFETCH path folds its layer norms (configs.ln_fold), ln_qkv and ln_fc read the norm's scale and the
    folded constants c1 = W g, c2 = W beta + bias (fp32, one each a row of W: projections._ln_gemv_one) where the other
    paths, and PREFETCH unfolded, read the scale, the shift and the bias in the weights' dtype; every other call reads
    the same."""
    shape = T.Shape(**{**GPT2.__dict__, "elem": elem})
    plain = T.calls(shape, T.Layout("gemv", 4, 786), 64)
    folded = T.calls(shape, T.Layout("gemv-prefetch", 4, 786, ln_fold=True), 64)
    unfolded = T.calls(shape, T.Layout("gemv-prefetch", 4, 786), 64)
    assert [c.weights for c in unfolded] == [c.weights for c in plain]
    E = GPT2.n_embd
    assert [c.kernel for c in plain] == [c.kernel for c in folded]
    for a, b in zip(plain, folded):
        n = {"ln_qkv": 3 * E, "ln_fc": 4 * E}.get(a.kernel)
        assert b.weights - a.weights == (0 if n is None else 2 * n * 4 - (n + E) * elem), a.kernel


def test_gpt2_per_call_weights_are_the_kernels_documented_reads() -> None:
    """The projections' docstrings (GPT-2 124M, fp32): the QKV matrix 7.08 MB, proj 2.36, FC and FC2 9.44 each,
    the embedding matrix 154.4 MB; the matrix is most of each call's weights (bias and norm parameters: KBs)."""
    per = {k.kernel: k for k in T.per_kernel(T.calls(GPT2, T.Layout("gemv", 4, 786), 64))}
    for name, mb in (("ln_qkv", 7.08), ("proj", 2.36), ("ln_fc", 9.44), ("fc2", 9.44), ("lm_head", 154.4)):
        per_call = per[name].weights / per[name].calls / 1e6
        assert abs(per_call - mb) < 0.03, (name, per_call)  # the docstrings round to 3-4 digits
    assert per["attention"].weights == 0 and per["attention"].kv == 12 * 2 * 768 * 65 * 4
    assert [(k.kernel, k.calls) for k in per.values()] == [("ln_qkv", 12), ("attention", 12), ("proj", 12),
                                                          ("ln_fc", 12), ("fc2", 12), ("lm_head", 1), ("argmax", 1)]


def test_early_attention_reads_the_whole_cache() -> None:
    early = T.calls(GPT2, T.Layout("gemv-prefetch", 4, 786, early_attention=True), 10)
    late = T.calls(GPT2, T.Layout("gemv-prefetch", 4, 786), 10)
    att = [i for i, c in enumerate(early) if c.kernel == "attention"]
    assert all(early[i].kv_read == 256 * 2 * 768 * 4 and late[i].kv_read == 11 * 2 * 768 * 4 for i in att)


def test_folded_ln_qkv_reads_what_attention_read_and_proj_reads_att_not_the_partials() -> None:
    five = T.calls(GPT2, T.Layout("gemv-prefetch", 4, 786), 10)
    four = T.calls(GPT2, T.Layout("gemv-prefetch", 4, 786, early_attention=True, fold=True), 10)
    assert len(five) - len(four) == 12 and [c.kernel for c in four][:4] == ["ln_qkv", "proj", "ln_fc", "fc2"]
    qkv5, att5, proj5 = five[12 * 5 - 5:12 * 5 - 2]  # the last layer's (no embedding)
    qkv4, proj4 = four[12 * 4 - 4:12 * 4 - 2]
    row = 768 * 4
    assert qkv4.kv_read == att5.kv_read == 11 * 2 * 768 * 4  # the reached slots: EARLY has no launch to read all
    assert (qkv4.weights, qkv4.kv_write) == (qkv5.weights, qkv5.kv_write)
    assert (qkv4.act_in, qkv4.act_out) == (qkv5.act_in + row, qkv5.act_out + row)  # q read back, att written
    assert proj4.act_in == 2 * row < proj5.act_in and proj4.weights == proj5.weights


def test_a_position_outside_the_cache_or_an_unknown_path_is_refused() -> None:
    with pytest.raises(ValueError, match="position 256 outside a 256-slot cache"):
        T.calls(GPT2, T.Layout("gemv", 4, 786), 256)
    with pytest.raises(ValueError, match="unknown path 'gemx'"):
        T.calls(GPT2, T.Layout("gemx", 4, 786), 0)


def test_the_folded_argmax_moves_its_launchs_bytes_into_lm_head() -> None:
    """With the argmax folded into lm_head (step.prepare's argmax_fold) the step reads and writes what it did, in one
    launch fewer: lm_head also reads the candidates back and writes the tokens."""
    layouts = [T.Layout("gemv-prefetch", 4, 786, fold=True, argmax_fold=f) for f in (False, True)]
    two, one = (T.calls(GPT2, layout, 10) for layout in layouts)
    assert [c.kernel for c in two] == [c.kernel for c in one] + ["argmax"]
    assert sum(c.total for c in two) == sum(c.total for c in one)
    assert one[-1].act_in == two[-2].act_in + two[-1].act_in and one[-1].act_out == two[-2].act_out + two[-1].act_out
    assert [c.total for c in two[:-2]] == [c.total for c in one[:-1]]


def test_byte_budget_is_the_traffic_summed_per_kernel() -> None:
    rows = C.byte_budget(12, 768, 12, 50257, 1, 4, reached_slots=65, n_splits=4, lm_blocks=786)
    per = T.per_kernel(T.calls(GPT2, T.Layout("gemv", 4, 786), 64))
    assert [(r.kernel, r.launches, r.weights, r.cache, r.activations) for r in rows] == \
        [(k.kernel, k.calls, k.weights, k.kv, k.activations) for k in per]


@pytest.mark.skipif(triton_import_error() is not None, reason=f"Triton does not import: {triton_import_error()}")
@pytest.mark.parametrize("path, prefetch, dtype, fold, argmax_fold", [("gemv", False, torch.float32, False, False),
                                                                      ("gemm", False, torch.float32, False, False),
                                                                      (None, True, torch.bfloat16, False, False),
                                                                      (None, True, torch.float32, True, False),
                                                                      ("gemv", False, torch.float32, False, True),
                                                                      (None, True, torch.float32, True, True)])
def test_the_calls_are_the_plans_launches_in_order(tiny, path, prefetch, dtype, fold, argmax_fold) -> None:
    """What `prepare` binds (on the CPU: nothing is launched) is what the traffic lists, launch for launch, with the
    plan's splits, argmax blocks, the prefetch variant's EARLY attention, the attention folded into ln_qkv and the
    argmax into lm_head."""
    from lab.step.fused.step import prepare

    w = extract_weights(tiny[0], dtype=dtype)
    state = D.new_state(w, 3 if path == "gemm" else 1, 24)
    plan = prepare(state, w, path=path, prefetch=prefetch, fold=fold, argmax_fold=argmax_fold,
                   overrides={"ln_qkv": C.GemvConfig(1, 8, 64)} if fold else None)
    assert plan.fold == fold and plan.argmax_fold == argmax_fold, plan.path_reason
    layout = T.Layout.of_plan(plan)
    assert layout.fold == fold and layout.argmax_fold == argmax_fold
    assert layout.path == str(plan.path) and layout.n_splits == plan.workspace.part_m.shape[2]
    assert layout.early_attention == any(x.meta.get("EARLY") for x in plan.launches if x.name == "attention")
    step = T.calls(T.Shape.of(w, state.batch, state.max_len), layout, 8)
    assert [c.kernel for c in step] == [x.name for x in plan.launches]
    from lab.step.fused.launch import LibraryCall

    for c, x in zip(step, plan.launches):  # the Triton function the profiler will name, or a library call
        assert c.function == (None if isinstance(x, LibraryCall) else x.kernel.__name__), c.kernel


def test_a_library_calls_form_moves_the_bytes_it_declares() -> None:
    """A plain-GEMM form with a bias writes the bias rows into the output and reads them back (B x N each way); lm_head
    through cuBLASLt's epilogue reads a zero bias (N); the weight's layout (W or Wt) moves the same bytes."""
    s = T.Shape(**{**GPT2.__dict__, "batch": 16})
    forms = (("fc_gemm", "blas-n"), ("lm_head_gemm", "lt-t"), ("qkv_gemm", "lt-n"))
    base, other = T.calls(s, T.Layout("gemm", 4, 99), 9), T.calls(s, T.Layout("gemm", 4, 99, forms=forms), 9)
    assert T.Layout("gemm", 4, 99, forms=forms).form("fc_gemm") == "blas-n"
    assert T.Layout("gemm", 4, 99).form("proj_gemm") == "lt-t" and T.Layout("gemm", 4, 99).form("lm_head_gemm") == "blas-t"
    F, V, w = 4 * s.n_embd, s.vocab, s.elem
    for a, b in zip(base, other):
        assert a.weights == b.weights and (a.kv_read, a.kv_write) == (b.kv_read, b.kv_write), a.kernel
        extra = {"fc_gemm": (16 * F * w, 16 * F * w), "lm_head_gemm": (V * w, 0)}.get(a.kernel, (0, 0))
        assert (b.act_in - a.act_in, b.act_out - a.act_out) == extra, a.kernel


@pytest.mark.skipif(triton_import_error() is not None, reason=f"Triton does not import: {triton_import_error()}")
def test_the_layouts_forms_are_the_plans_library_calls(tiny, monkeypatch) -> None:
    """A plan bound in measured forms (a fake timer on the CPU): Layout.of_plan names the forms that are not the
    default, and the traffic's calls are still the plan's launches in order."""
    from lab.step.fused import layout as LY, library
    from lab.step.fused.step import prepare

    _, w = tiny
    wins = {"proj": "blas-n", "lm_head": "lt-n"}
    real = LY.measure

    def measure(projection, default, forms, per_burst, timer, agree=None, shape=(0, 0, 0)):
        fake = lambda b: {f: [1.0 if wins.get(projection) == f else 2.0] for f in b}  # noqa: E731
        return real(projection, default, forms, per_burst, fake, agree, shape)

    choose = library.choose_forms
    monkeypatch.setattr(LY, "measure", measure)
    monkeypatch.setattr(library, "choose_forms", lambda w_, bufs, timer=None: choose(w_, bufs, lambda b: {}))
    plan = prepare(D.new_state(w, 8, 24), w)  # batch 8: the gemm path
    layout = T.Layout.of_plan(plan)
    assert layout.forms == (("lm_head_gemm", "lt-n"), ("proj_gemm", "blas-n"))
    step = T.calls(T.Shape.of(w, 8, 24), layout, 8)
    assert [c.kernel for c in step] == [x.name for x in plan.launches]
    assert [x.form for x in plan.launches if x.name == "proj_gemm"] == ["blas-n"] * w.n_layer
