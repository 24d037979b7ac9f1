"""The fused step's gemm path: the library's GEMMs (torch.addmm) with the fused Triton row kernels around them.

Chosen by lab.step.fused.rule above a batch threshold, where the GEMV kernels would read each weight
tile once per 4-row tile. Per layer, 9 launches (4 of them the library's GEMMs: cuBLAS on CUDA, one read
of each weight for the whole batch; by default the same calls as the eager step's `F.linear`, see the
forms below):

    add_ln       layer 0: x = wte[tok] + wpe[pos]; later layers: x += the previous fc2 GEMM's y;
                 xn = layer_norm_1(x)
    addmm qkv    qkv = attn_b + xn @ attn_w.T
    attention    q and this step's K/V from qkv (the cache written at pos by the split that holds it)
    combine      the splits normalised -> att
    addmm proj   y = proj_b + att @ proj_w.T
    add_ln       x += y; xn = layer_norm_2(x)
    addmm fc     h = fc_b + xn @ fc_w.T
    gelu         h = gelu(h), in place
    addmm fc2    y = fc2_b + h @ fc2_w.T

then once: add_ln (x += y; the final layer norm), mm (logits = xn @ wte.T), block_argmax, argmax:
9 n_layer + 4 launches (112 for GPT-2 124M). The residual stream stays fp32 as on the gemv path;
what a GEMM reads or writes is in the weights' dtype (its input and output, as in the eager step).

How each product calls the library is a form (lab.step.fused.layout: cuBLASLt with the bias in its
epilogue or the plain cuBLAS GEMM, on W [out, in] or a contiguous copy Wt [in, out]), chosen when the
plan is made (`choose_forms`): on CUDA measured per projection, elsewhere the declared default (the
calls above). A plain-GEMM form with a bias launches two library kernels (the bias rows copied into
the output, then the GEMM with beta 1). A plan keeps only the Wt copies of the projections whose
chosen form reads them; `choice_of(plan)` gives the choice with every candidate's median (the
`fused_layouts` note). Every call still writes a preallocated output (`out=`; a plain-GEMM form's
bias is an expanded view), so the captured graph holds them as before.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.measure import profiler_guard
from lab.measure.timing import clock_for, time_methods
from lab.step.decode import DecodeState
from lab.step.fused import configs as C, layout as LY
from lab.step.fused.kernels import KERNELS
from lab.step.fused.launch import Launch, LibraryCall
from lab.step.model import Weights


def buffers(batch: int, w: Weights) -> dict[str, torch.Tensor]:
    """The gemm path's GEMM inputs and outputs, in the weights' dtype."""
    E, dev, dt = w.n_embd, w.device, w.dtype
    return {name: torch.zeros(batch, n, dtype=dt, device=dev)
            for name, n in (("xn", E), ("qkv", 3 * E), ("att", E), ("y", E), ("h", 4 * E))}


def operands(p: LY.Projection, w: Weights) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight [out, in], bias or None) of projection `p`, per layer (lm_head: the one tied wte)."""
    if p.bias is None:
        return [(getattr(w, p.weight), None)]
    return [(getattr(lw, p.weight), getattr(lw, p.bias)) for lw in w.layers]


def call(form: LY.Form | str, p: LY.Projection, weight: torch.Tensor, bias: torch.Tensor | None, a: torch.Tensor,
         out: torch.Tensor, wt: torch.Tensor | None = None, zero: torch.Tensor | None = None) -> LibraryCall:
    """out = a @ weight.T (+ bias) in `form` (lab.step.fused.layout.Form): `wt` is weight.t().contiguous() for the
    forms that read it, `zero` a zero bias of out's width for lm_head's epilogue forms. No allocation in the call."""
    form = LY.Form(form)
    if form.transposed and wt is None:
        raise ValueError(f"fused gemm path: form {form} of {p.name} needs the contiguous copy Wt")
    mat2 = wt if form.transposed else weight.t()
    if form.epilogue:
        if bias is None and zero is None:
            raise ValueError(f"fused gemm path: form {form} of {p.name} needs a zero bias")
        return LibraryCall(p.launch, torch.addmm, (bias if bias is not None else zero, a, mat2), {"out": out},
                           form=str(form))
    if bias is None:
        return LibraryCall(p.launch, torch.mm, (a, mat2), {"out": out}, form=str(form))
    # a 2-D (expanded) bias: torch copies it into out, then the plain GEMM accumulates with beta 1
    return LibraryCall(p.launch, torch.addmm, (bias.expand(out.shape[0], out.shape[1]), a, mat2), {"out": out},
                       form=str(form))


@dataclass
class Bound:
    """A plan's forms and the operands only they need: the Wt copies kept, lm_head's zero bias."""

    choice: LY.Choice
    transposed: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    zeros: dict[str, torch.Tensor] = field(default_factory=dict)


def _shape(p: LY.Projection, w: Weights, bufs: dict[str, torch.Tensor]) -> tuple[int, int, int]:
    weight = operands(p, w)[0][0]
    return int(bufs[p.source].shape[0]), int(weight.shape[1]), int(weight.shape[0])


def _agree(dtype: torch.dtype) -> Any:
    rel = LY.AGREE_REL[str(dtype).removeprefix("torch.")]

    def agree(ref: torch.Tensor, got: torch.Tensor) -> str | None:
        diff = float((got.float() - ref.float()).abs().max())
        scale = float(ref.float().abs().max())
        return None if diff <= rel * scale else f"largest difference {diff:.3g}, more than {rel:g} x {scale:.3g}"

    return agree


def cuda_timer(device: torch.device, rounds: int = LY.ROUNDS, calls: int = LY.CALLS) -> LY.Timer:
    """The bursts timed with CUDA events (lab.measure.timing: the profiler guard and timed sections apply): rotating
    rounds, each `calls` bursts after one untimed; per form its per-round medians, us a burst."""
    clock = clock_for(device)

    def timer(bursts: Any) -> dict[str, list[float]]:
        got = time_methods(bursts, clock, rounds, calls, warmup=1)
        return {f: [statistics.median(r) * 1e3 for r in per_round] for f, per_round in got.items()}

    return timer


def choose_forms(w: Weights, bufs: dict[str, torch.Tensor], timer: LY.Timer | None = None) -> Bound:
    """Each projection's form: measured with `timer` (None: CUDA events on a CUDA device), else the declared default.
    The input buffers are filled with seeded random values for the agreement check and every buffer is zeroed
    after; the Wt copies of a form not chosen are dropped."""
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    shapes = {p.name: _shape(p, w, bufs) for p in LY.PROJECTIONS}

    def declared(why: str) -> Bound:
        return Bound(LY.Choice(tuple(LY.declared(p, why, shapes[p.name]) for p in LY.PROJECTIONS), False, why, tf32))

    if timer is None and w.device.type != "cuda":
        return declared(f"declared default: forms are timed on CUDA only (here: {w.device.type})")
    try:
        timer = timer or cuda_timer(w.device)
        profiler_guard.check_clean("choosing the fused gemm path's forms")
        return _measured(w, bufs, timer, shapes, tf32)
    except profiler_guard.ProfilerResidue as exc:
        return declared(f"declared default: not timed ({exc})")
    finally:
        for t in bufs.values():
            t.zero_()


def _measured(w: Weights, bufs: dict[str, torch.Tensor], timer: LY.Timer, shapes: dict[str, tuple[int, int, int]],
              tf32: bool) -> Bound:
    gen = torch.Generator(device=w.device).manual_seed(0)
    for key in dict.fromkeys(p.source for p in LY.PROJECTIONS):  # in declared order: the same values every run
        src = bufs[key]
        src.copy_(torch.randn(src.shape, generator=gen, device=w.device, dtype=torch.float32))
    picks, out = [], Bound(LY.Choice((), True, ""))
    agree = _agree(w.dtype)
    for p in LY.PROJECTIONS:
        ops, a, dst = operands(p, w), bufs[p.source], bufs[p.target]
        wt = [weight.t().contiguous() for weight, _ in ops]
        zero = torch.zeros(dst.shape[1], dtype=dst.dtype, device=dst.device) if p.bias is None else None

        def burst(form: LY.Form) -> Any:
            calls = [call(form, p, weight, bias, a, dst, wt[i], zero) for i, (weight, bias) in enumerate(ops)]

            def run() -> None:
                for c in calls:
                    c()

            return run

        forms = [LY.Candidate(str(f), burst(f), dst.clone) for f in LY.candidates(p)]
        got = LY.measure(p.name, str(LY.DEFAULT[p.name]), forms, len(ops), timer, agree, shapes[p.name])
        picks.append(got)
        chosen = LY.Form(got.chosen)
        if chosen.transposed:
            out.transposed[p.name] = wt
        if chosen.epilogue and zero is not None:
            out.zeros[p.name] = zero
    kept = [t for ts in out.transposed.values() for t in ts] + list(out.zeros.values())
    where = torch.cuda.get_device_name(w.device) if w.device.type == "cuda" else str(w.device)
    out.choice = LY.Choice(tuple(picks), True, f"timed on {where}", tf32,
                          sum(t.numel() * t.element_size() for t in kept))
    return out


def choice_of(plan: Any) -> LY.Choice | None:
    """The forms a gemm-path plan's library calls were bound in, with every candidate's median (None: no gemm path)."""
    return plan.workspace.layouts


def launches(state: DecodeState, w: Weights, ws: Any, cfg: dict[str, C.Config], common: dict[str, Any],
             x_out: torch.Tensor, new_pos: torch.Tensor) -> list[Launch | LibraryCall]:
    """Every launch of one step on the gemm path, bound to `state`, `w` and the workspace `ws`."""
    B, L, E, H, V = state.batch, state.max_len, w.n_embd, w.n_head, int(w.wte.shape[0])
    DH, F = E // H, 4 * E
    lib = ws.library
    xn, qkv, att, y, h = (lib[k] for k in ("xn", "qkv", "att", "y", "h"))
    ln, comb, gl, ba, att_cfg, am = (cfg[k] for k in ("add_ln", "combine", "gelu", "block_argmax", "attention",
                                                       "argmax"))
    assert isinstance(ln, C.RowConfig) and isinstance(comb, C.RowConfig) and isinstance(gl, C.RowConfig)
    assert isinstance(ba, C.RowConfig) and isinstance(att_cfg, C.AttentionConfig) and isinstance(am, C.ArgmaxConfig)
    NS, nblk = C.cdiv(L, att_cfg.BS), C.cdiv(V, ba.BN)
    BE = C.next_pow2(E)

    def add_ln(g: torch.Tensor, beta: torch.Tensor, embed: bool, add: bool) -> Launch:
        return Launch("add_ln", KERNELS["add_ln"], (C.cdiv(B, ln.BB),), (
            ws.x, y, state.tok, w.wte, w.wpe, state.pos, g, beta, x_out, xn, B, w.eps),
            {"E": E, "BE": BE, "BB": ln.BB, "EMBED": embed, "ADD": add, "num_warps": ln.num_warps, **common})

    bufs = {**lib, "logits": ws.logits}
    bound = choose_forms(w, bufs)
    ws.layouts = bound.choice

    def gemm(name: str, i: int) -> LibraryCall:
        p = LY.BY_LAUNCH[name]
        weight, bias = operands(p, w)[i]
        wt = bound.transposed.get(p.name)
        return call(bound.choice.forms[p.name], p, weight, bias, bufs[p.source], bufs[p.target],
                    None if wt is None else wt[i], bound.zeros.get(p.name))

    nbb = C.cdiv(B, comb.BB)
    out: list[Launch | LibraryCall] = []
    for i, lw in enumerate(w.layers):
        cache = state.caches[i]
        out.append(add_ln(lw.ln1_w, lw.ln1_b, i == 0, i > 0))
        out.append(gemm("qkv_gemm", i))
        out.append(Launch("attention", KERNELS["attention"], (B * H * NS,), (
            qkv, cache, state.pos, ws.part_o, ws.part_m, ws.part_l, B, L, 1.0 / math.sqrt(DH)),
            {"E": E, "H": H, "DH": DH, "NS": NS, "BS": att_cfg.BS, "BD": C.next_pow2(DH), "QKV": True,
             "num_warps": att_cfg.num_warps, **common}))
        out.append(Launch("combine", KERNELS["combine"], (C.cdiv(E, comb.BN) * nbb,), (
            ws.part_o, ws.part_m, ws.part_l, att, B, nbb),
            {"E": E, "H": H, "DH": DH, "NS": NS, "BB": comb.BB, "BK": comb.BN, "num_warps": comb.num_warps, **common}))
        out.append(gemm("proj_gemm", i))
        out.append(add_ln(lw.ln2_w, lw.ln2_b, False, True))
        out.append(gemm("fc_gemm", i))
        out.append(Launch("gelu", KERNELS["gelu"], (C.cdiv(B * F, gl.BN),), (h, B * F),
                          {"BLOCK": gl.BN, "num_warps": gl.num_warps, **common}))
        out.append(gemm("fc2_gemm", i))
    out.append(add_ln(w.ln_f_w, w.ln_f_b, False, True))
    out.append(gemm("lm_head_gemm", 0))
    nbb = C.cdiv(B, ba.BB)
    out.append(Launch("block_argmax", KERNELS["block_argmax"], (nblk * nbb,), (ws.logits, ws.lm_val, ws.lm_idx, B, nbb),
                      {"V": V, "NBLK": nblk, "BB": ba.BB, "BN": ba.BN, "num_warps": ba.num_warps, **common}))
    out.append(Launch("argmax", KERNELS["argmax"], (1,), (
        ws.lm_val, ws.lm_idx, state.tok, state.out, state.pos, new_pos, L),
        {"B": B, "NBLK": nblk, "BB": am.BB, "BP": C.next_pow2(nblk), "num_warps": am.num_warps, **common}))
    return out
