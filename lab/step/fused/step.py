"""The hand-fused decode step: `lab.step.decode.decode_step` as 62 Triton kernel launches (GPT-2 124M).

Same contract as the eager step it reproduces: one greedy step over a `DecodeState`, in place, at
the device-side position; returns logits [B, V]. No host synchronisation, no host control flow
that depends on values, no allocation after `prepare` (the workspace is allocated once), so a
CUDA graph can capture it and replay it. The eager step stays the reference (tests/test_fused.py).

Kernels per step (lab.step.fused.kernels), n_layer = 12:

    per layer  ln_qkv      layer norm 1 + QKV GEMV + bias + K/V cache write (layer 0: + embedding)
               attention   q over the reached cache slots, split over slots (partials)
               proj        combine the splits + projection GEMV + bias + residual
               ln_fc       layer norm 2 + FC GEMV + bias + GELU
               fc2         FC2 GEMV + bias + residual
    once       lm_head     final layer norm + logits = x @ wte.T + per-block argmax
               argmax      the token, out[:, pos + 1], tok, pos += 1

    5 x 12 + 2 = 62 launches (eager: 203 kernels; compile + capture: 147).

    With the attention folded in (`fold`, the PDL methods' default: FOLD_WITH_PDL), ln_qkv's last program of each
    head computes the head's attention and proj reads it: 4 x 12 + 2 = 50 launches. With the argmax folded into
    lm_head (`argmax_fold`, where configs.ARGMAX_FOLD binds it), lm_head's last program takes it: one launch fewer.

Byte budget of a step (GPT-2 124M, batch 1; `configs.byte_budget` computes it for any shape):

    kernel      launches   fp32 weights   bf16 weights   other (fp32 activations, cache at 256 slots)
    ln_qkv         12        85.1 MB        42.6 MB      cache write 74 KB
    attention      12         -              -           cache read 18.9 MB fp32 / 9.4 MB bf16
    proj           12        28.3 MB        14.2 MB
    ln_fc          12       113.5 MB        56.7 MB
    fc2            12       113.3 MB        56.6 MB
    lm_head         1       154.4 MB        77.2 MB      logits 201 KB fp32
    argmax          1         -              -           6 KB
    total          62       494.6 MB       247.3 MB      + ~1.5 MB activations

At the H200's measured 4.2 TB/s copy bandwidth the weights alone take 0.118 ms (fp32) and
0.059 ms (bf16): the floor. What else sets the time is 62 x the per-kernel fixed cost (a graph
node's launch, ~1.3 us measured, plus each kernel's ramp-up and tail), which is why every GEMV
kernel's grid covers all SMs at batch 1 (each program streams its own rows: no atomics, so
results are deterministic) and why `fused-pdl` lets each kernel start loading its weights while
the previous one drains.

Above a batch threshold (lab.step.fused.rule) the plan takes the gemm path instead (lab.step.fused.library):
the library's GEMMs for the projections, the fused Triton row kernels around them, 9 x n_layer + 4
launches; `plan.path` says which path a plan took and `plan.path_reason` why.

Past the end of the cache the kernels write nothing (eager's indexed store would assert on the
device instead); `lab.step.graphs.GraphedStep` refuses such a replay on the host before either happens.

`fused-pdl` (fused_step_pdl): the same kernels launched with programmatic dependent launch
(Triton's `launch_pdl=True`, `tl.extra.cuda.gdc_wait` / `gdc_launch_dependents`). It needs compute
capability 9.0+ (Hopper) and, inside a CUDA graph, stream capture that records the launches as
programmatic edges (CUDA 12.3 or newer; Inductor's own `triton.enable_pdl` is measured that way).
It is off by default, `prepare(pdl=True)` refuses other devices, and tests/test_fused.py captures
and replays it on the GPU.

`fused-pdl-prefetch` (fused_step_pdl_prefetch, `prepare(pdl=True, prefetch=True)`): the same kernels
with their PREFETCH switch (lab.step.fused.kernels), which moves every weight read of a GEMV program --
its whole slice, one chunk (configs.prefetch_config), the bias, the layer-norm parameters (folded into
the product where configs.ln_fold says so: `ln_folded`) -- before the PDL wait, so the weight stream of
a kernel overlaps the previous kernel instead of only its first tile; and, where the tiles fit
(configs.attention_early: bf16 at the tuned split), attention loads K and V of its split together right
after the wait instead of position, then K, then V (the SASS of the default kernel shows V loaded after
the softmax: three dependent round trips). On the H200 the tuned step took 0.301 ms in bf16 (0.268 with
PDL): 62 kernels at ~4 us
for 1-5 MB each, where streaming the bytes at 4.2 TB/s would take ~1 us; what remains after the
wait is then L2 traffic and arithmetic, so the launch-to-launch chain shortens. A separate method,
so that a run measures it beside `fused-pdl`.
"""

from __future__ import annotations

import inspect
import math
import os
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from lab.step.decode import DecodeState
from lab.step.fused import configs as C, rule as R
from lab.step.fused.kernels import KERNELS
from lab.step.fused.launch import Launch, LibraryCall
from lab.step.model import Weights

__all__ = ["FusedPlan", "Launch", "LibraryCall", "Workspace", "bind", "fused_step", "fused_step_pdl",
           "fused_step_pdl_prefetch", "pdl_supported", "plan_for", "prepare"]


@dataclass
class Workspace:
    """Every intermediate of a step, allocated once (fp32 except logits, in the weights' dtype, and the residual where
    `prepare(residual=...)` asks for another dtype)."""

    x: torch.Tensor  # [B, E] the residual stream
    q: torch.Tensor  # [B, E] this layer's query
    part_o: torch.Tensor  # [B, H, NS, dh] attention partials: exp-weighted sums of V
    part_m: torch.Tensor  # [B, H, NS] running max of the scores
    part_l: torch.Tensor  # [B, H, NS] sum of exp
    h: torch.Tensor  # [B, 4E] MLP hidden activations
    logits: torch.Tensor  # [B, V] what the step returns
    lm_val: torch.Tensor  # [B, lm blocks] each lm_head program's largest logit
    lm_idx: torch.Tensor  # [B, lm blocks] int32: and its index
    x_scratch: torch.Tensor  # [B, E] where the residual kernels write in a repeatable plan
    pos_scratch: torch.Tensor  # [1] where the argmax kernel writes pos + 1 in a repeatable plan
    # a folding plan's attention output [B, E] (normalised) and its heads' counters (int32 [cdiv(B, BB), H], zero
    # between launches): ln_qkv attends and proj reads att (lab.step.fused.attention._fold_attention; empty otherwise)
    att: torch.Tensor | None = None
    heads: torch.Tensor | None = None
    # and its words (int64 [B, 4E + 2H], every word zero between launches): where ln_qkv's programs leave their rows,
    # and each head's last q program its partial, for the head's last count-in where OLDER_FIRST=2 is bound
    # (attention._words_put, _newest_words; empty otherwise)
    mail: torch.Tensor | None = None
    # where the argmax is folded into lm_head, its programs' counter (int32 [1], zero between launches: its last
    # program takes the argmax; lab.step.fused.projections.lm_head_kernel's ARGMAX_FOLD; empty otherwise)
    lm_done: torch.Tensor | None = None
    # the gemm path's GEMM inputs and outputs (lab.step.fused.library.buffers; empty on the gemv path,
    # where q and h are used instead: empty on the gemm path)
    library: dict[str, torch.Tensor] = field(default_factory=dict)
    # the grid barrier's two counters (lab.step.fused.grid; int32, zero between launches) of the persistent plan
    # (lab.step.fused.persistent; None in the others)
    barrier: torch.Tensor | None = None
    # the gemm path's library-call forms, with every candidate's median (lab.step.fused.layout.Choice; None on the
    # gemv path): what `library.choice_of` reads back for the `fused_layouts` note
    layouts: Any = None

    def nbytes(self) -> int:
        tensors = [t for t in self.__dict__.values() if isinstance(t, torch.Tensor)] + list(self.library.values())
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class FusedPlan:
    """The fused step bound to one state and one set of weights: configs, workspace, launches."""

    configs: dict[str, C.Config]
    workspace: Workspace
    launches: list[Launch | LibraryCall]
    pdl: bool
    sms: int
    state_ref: Any = field(repr=False, default=None)
    weights_ref: Any = field(repr=False, default=None)
    prefetch: bool = False  # the PREFETCH kernels run (asked for and taken: path gemv-prefetch)
    path: R.Path = R.Path.GEMV  # the projection path (lab.step.fused.rule)
    path_reason: str = ""  # why the rule chose it
    fold: bool = False  # ln_qkv folds the attention in: four launches a layer (asked for and taken)
    ln_fold: bool = False  # the PREFETCH kernels fold their layer norms into the product (configs.ln_fold)
    card: str = ""  # the card whose per-card tables were consulted (configs.device_card; "" for none)
    residual: str = "float32"  # the residual stream's dtype (x and x_scratch; prepare's `residual`)
    argmax_fold: bool = False  # lm_head's last program takes the argmax: no argmax launch (prepare's `argmax_fold`)

    def __call__(self) -> torch.Tensor:
        for launch in self.launches:
            launch()
        return self.workspace.logits

    def binds(self, state: DecodeState, w: Weights) -> bool:
        return self.state_ref() is state and self.weights_ref() is w


def pdl_supported(device: torch.device) -> tuple[bool, str]:
    """Whether programmatic dependent launch can be used on this device, and why not."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False, "programmatic dependent launch needs a CUDA device (Hopper or newer)"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return False, f"programmatic dependent launch needs compute capability 9.0+ (this device: {major}.{minor})"
    return True, ""


def bulk_prefetch(device: torch.device) -> bool:
    """Whether the folded ln_qkv's KV_L2 (attention._kv_to_l2: `cp.async.bulk.prefetch.L2`, inline PTX of compute
    capability 9.0) can run here: on a CUDA device of 9.0 or newer, or in a plan over CPU tensors compiled ahead of time
    for sm_90 (lab.step.fused.aot); never in Triton's interpreter, which runs no inline assembly."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 9


def _check(state: DecodeState, w: Weights) -> None:
    E, H = w.n_embd, w.n_head
    if E % H:
        raise ValueError(f"fused step: n_embd {E} is not a multiple of n_head {H}")
    if w.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"fused step: weights of dtype {w.dtype} (float32, bfloat16, float16)")
    tensors = w.tensors() + list(state.buffers().values())
    if any(not t.is_contiguous() for t in tensors):
        raise ValueError("fused step: every weight and state buffer must be contiguous")
    if any(t.device != w.device for t in tensors):
        raise ValueError("fused step: weights and state must be on one device")
    if any(c.dtype != w.dtype for c in state.caches):
        raise ValueError(f"fused step: the cache dtype must be the weights' ({w.dtype})")
    if state.max_len > w.wpe.shape[0]:
        raise ValueError(f"fused step: a {state.max_len}-slot cache but only {w.wpe.shape[0]} positions in wpe")
    if max(t.numel() for t in tensors) >= 2**31:
        raise ValueError("fused step: a tensor of 2**31 elements or more (the kernels index with int32)")


def prepare(state: DecodeState, w: Weights, pdl: bool = False, sms: int | None = None,
            overrides: dict[str, C.Config] | None = None, repeatable: bool = False,
            prefetch: bool = False, path: R.Path | str | None = None, fold: bool | None = None,
            card: str | None = None, residual: torch.dtype | None = None,
            argmax_fold: bool | None = None) -> FusedPlan:
    """Choose the path and configs, allocate the workspace and bind every launch. Call it before any capture.

    `path`: the projection path (lab.step.fused.rule); None lets the rule choose it from the batch, the
    width and the dtype, "gemv" or "gemm" forces one (tests, the tuner, measuring both paths).

    `prefetch=True` asks for the GEMV kernels' PREFETCH path with one-chunk configs (the
    `fused-pdl-prefetch` method uses it with `pdl=True`; without PDL it only moves loads earlier);
    the rule takes it only where it pays (`plan.prefetch` says whether it did, `plan.path_reason` why).

    `repeatable=True` is for timing only: the residual kernels write a scratch copy and the position
    is not advanced, so any launch (or the whole plan) can be repeated and does the same work every
    time (only the fed token changes, a different embedding row); it is not a correct step.

    `fold=True` asks for ln_qkv to compute each head's attention in its last program (the gemv paths only, and only
    where ln_qkv's BN divides the head's width: `configs.fold_refusal`): no attention launch, `proj` reads the
    normalised output. None (the default) asks for it with PDL (`FOLD_WITH_PDL`), False never. `plan.fold` says
    whether it was taken, `plan.path_reason` why not.

    `card`: the name of the card whose per-card tables apply (configs.KV_AT_ONCE_FIRST, SUM_ONCE_FIRST, PIECES_FIRST);
    None takes the device's (configs.device_card: "" on the CPU), a name builds that card's plan anywhere (tests, `aot
    --card`).

    `residual`: the residual stream's dtype (x and x_scratch: every kernel reads it in fp32 and adds in fp32, and the
    residual kernels round their sums to it as they store), fp32 unless given; the weights' dtype (bf16) halves the
    bytes every program of every kernel reads after its wait, rounding the stream as the eager bf16 step does (the
    teacher-forced rule judges it). The gemv paths only: ValueError where the plan takes the gemm path. An experiment
    (`python -m lab.step.fused.ab ... table "plan:RESIDUAL_BF16=1"`): 6-8% slower on an H100, so no method asks for it.

    `argmax_fold=True` asks for lm_head's last program to take the argmax and advance the step (the gemv paths only:
    ValueError where the plan takes the gemm path): no argmax launch. None (the default) takes it where
    configs.argmax_fold binds it on the gemv paths, False never. `plan.argmax_fold` says whether it was taken. The A/B
    times it as `plan:ARGMAX_FOLD=1`.
    """
    _check(state, w)
    if pdl:
        ok, why = pdl_supported(w.device)
        if not ok:
            raise ValueError(f"fused-pdl: {why}")
    B, L, E, H, V = state.batch, state.max_len, w.n_embd, w.n_head, int(w.wte.shape[0])
    DH, F, dev = E // H, 4 * E, w.device
    sms = sms or C.device_sms(dev)
    card = C.device_card(dev) if card is None else card
    tiles: dict[str, int] = {}
    if prefetch and path is None:  # what the rule weighs: the row tiles of the one-chunk configs
        one_chunk = C.choose(E, H, V, L, B, w.dtype, sms, overrides, prefetch=True, card=card)
        tiles = {k: g.BB for k, g in one_chunk.items() if k in C.PREFETCH_KERNELS and isinstance(g, C.GemvConfig)}
    choice = R.choose(B, E, str(w.dtype), prefetch, tiles, forced=path)
    prefetch = choice.path == R.Path.GEMV_PREFETCH
    gemm = choice.path == R.Path.GEMM
    cfg = (C.choose_library(E, H, V, L, B, sms, overrides) if gemm
           else C.choose(E, H, V, L, B, w.dtype, sms, overrides, prefetch=prefetch, card=card))
    att, am = cfg["attention"], cfg["argmax"]
    lm = cfg["block_argmax" if gemm else "lm_head"]
    assert isinstance(att, C.AttentionConfig) and isinstance(am, C.ArgmaxConfig)
    assert isinstance(lm, C.GemvConfig | C.RowConfig)
    residual = residual or torch.float32
    if residual not in (torch.float32, w.dtype):
        raise ValueError(f"fused step: a residual in {residual} (float32 or the weights' {w.dtype})")
    if gemm and residual != torch.float32:
        raise ValueError(f"fused step: a residual in {residual} on the gemm path (its row kernels keep it in fp32)")
    if gemm and argmax_fold:
        raise ValueError("fused step: the argmax folded into lm_head on the gemm path (its logits come from a library "
                         "GEMM: block_argmax and the argmax stay launches)")
    argmax_fold = not gemm and (C.argmax_fold(str(w.dtype), E) if argmax_fold is None else argmax_fold)
    NS = C.cdiv(L, att.BS)  # attention splits
    nblk = C.cdiv(V, lm.BN)  # lm_head (or logits) row blocks, each leaving one argmax candidate
    f32 = dict(dtype=torch.float32, device=dev)
    res = dict(dtype=residual, device=dev)
    ws = Workspace(x=torch.zeros(B, E, **res), q=torch.zeros(0 if gemm else B, E, **f32),
                   part_o=torch.zeros(B, H, NS, DH, **f32), part_m=torch.zeros(B, H, NS, **f32),
                   part_l=torch.zeros(B, H, NS, **f32), h=torch.zeros(0 if gemm else B, F, **f32),
                   logits=torch.zeros(B, V, dtype=w.dtype, device=dev),
                   lm_val=torch.zeros(B, nblk, **f32), lm_idx=torch.zeros(B, nblk, dtype=torch.int32, device=dev),
                   x_scratch=torch.zeros(B, E, **res), pos_scratch=torch.zeros_like(state.pos))
    x_out = ws.x_scratch if repeatable else ws.x
    new_pos = ws.pos_scratch if repeatable else state.pos
    common = {"USE_PDL": pdl, **({"launch_pdl": True} if pdl else {})}

    fold = folds(fold, pdl)
    refusal = "" if not fold or gemm else C.fold_refusal(cfg["ln_qkv"], DH)  # the gemm path's plans never fold
    fold = fold and not gemm and not refusal
    reason = choice.reason + (f"; attention not folded into ln_qkv: {refusal}" if refusal else "")
    ln_fold = prefetch and C.ln_fold(str(w.dtype), E)  # (prefetch: the gemv-prefetch path only)
    evict = prefetch and C.evict_first(str(w.dtype), E)  # measured on the gemv-prefetch path only
    kv_l2 = fold and prefetch and C.kv_l2(str(w.dtype), E) and bulk_prefetch(dev)  # likewise, and only where it runs
    kv_at_once = fold and prefetch and C.kv_at_once(str(w.dtype), E, card)  # a select: the interpreter runs it too
    pieces = {"PIECES": True} if prefetch and C.pieces(str(w.dtype), E, card) else {}  # ln_qkv's row in pieces

    def made(launches: list[Launch | LibraryCall]) -> FusedPlan:
        return FusedPlan(cfg, ws, launches, pdl, sms, weakref.ref(state), weakref.ref(w), prefetch, choice.path,
                         reason, fold, ln_fold, card, str(residual).removeprefix("torch."), argmax_fold)

    if gemm:
        from lab.step.fused import library

        ws.library = library.buffers(B, w)
        return made(library.launches(state, w, ws, cfg, common, x_out, new_pos))

    def gemv(name: str, N: int) -> tuple[tuple[int], dict[str, Any], int]:
        g = cfg[name]
        assert isinstance(g, C.GemvConfig)
        nbb = C.cdiv(B, g.BB)
        meta = {"BB": g.BB, "BN": g.BN, "BK": g.BK, "num_warps": g.num_warps, **common}
        if prefetch and name in C.PREFETCH_KERNELS:
            meta["PREFETCH"] = True
        if evict:  # every GEMV kernel's weight loads marked to leave L2 first (projections._weights)
            meta["EVICT"] = 1
        return (C.cdiv(N, g.BN) * nbb,), meta, nbb

    BE, BD, scale = C.next_pow2(E), C.next_pow2(DH), 1.0 / math.sqrt(DH)
    qkv = cfg["ln_qkv"]
    assert isinstance(qkv, C.GemvConfig)
    ws.att = torch.zeros(B if fold else 0, E, **f32)
    # (two sets: the heads' own, and the q programs' of OLDER_FIRST, a switch: attention._fold_attention)
    ws.heads = torch.zeros(2 * C.cdiv(B, qkv.BB) * H if fold else 0, dtype=torch.int32, device=dev)
    ws.mail = torch.zeros(B * (4 * E + 2 * H) if fold else 0, dtype=torch.int64, device=dev)
    # folded, ln_qkv's programs run head by head where that measured faster (configs.head_major,
    # attention._qkv_block_row): each head's attention comes as its last program does, not all at the launch's end;
    # its heads' K and V asked into L2 before the wait where that measured faster (configs.kv_l2), and each chunk's K and
    # V in one round trip on the cards where that did (configs.kv_at_once)
    folding = ({"FOLD": True, "BS": C.fold_slots(L, DH, qkv.num_warps), "BD": BD, "NS": NS,
                "HEAD_MAJOR": C.head_major(str(w.dtype), E), **({"KV_L2": True} if kv_l2 else {}),
                **({"KV_AT_ONCE": True} if kv_at_once else {})} if fold else {})
    ln_folding = {"LN_FOLD": True} if ln_fold else {}
    launches: list[Launch | LibraryCall] = []
    for i, lw in enumerate(w.layers):
        cache = state.caches[i]
        # the PREFETCH kernels' folded layer norms (projections._ln_gemv_one); where not folded, the bias there, unused
        qkv_c = ln_folded(lw.attn_w, lw.ln1_w, lw.ln1_b, lw.attn_b) if ln_fold else (lw.attn_b, lw.attn_b)
        fc_c = ln_folded(lw.fc_w, lw.ln2_w, lw.ln2_b, lw.fc_b) if ln_fold else (lw.fc_b, lw.fc_b)
        grid, meta, nbb = gemv("ln_qkv", 3 * E)
        launches.append(Launch("ln_qkv", KERNELS["ln_qkv"], grid, (
            ws.x, state.tok, w.wte, w.wpe, state.pos, lw.ln1_w, lw.ln1_b, lw.attn_w, lw.attn_b, *qkv_c, ws.q, cache,
            B, nbb, L, w.eps, ws.att, ws.heads, scale, ws.part_o, ws.part_m, ws.part_l, ws.mail),
            {"E": E, "H": H, "DH": DH, "EMBED": i == 0, "BE": BE, **meta, **folding, **ln_folding, **pieces}))
        if not fold:
            launches.append(Launch("attention", KERNELS["attention"], (B * H * NS,), (
                ws.q, cache, state.pos, ws.part_o, ws.part_m, ws.part_l, B, L, scale),
                {"E": E, "H": H, "DH": DH, "NS": NS, "BS": att.BS, "BD": BD, "num_warps": att.num_warps,
                 **common, **({"EARLY": True} if prefetch and C.attention_early(att, DH) else {})}))
        grid, meta, nbb = gemv("proj", E)
        launches.append(Launch("proj", KERNELS["proj"], grid, (
            ws.att if fold else ws.part_o, ws.part_m, ws.part_l, lw.proj_w, lw.proj_b, ws.x, x_out, B, nbb),
            {"E": E, "H": H, "DH": DH, "NS": NS, **meta, **({"FOLDED": True} if fold else {})}))
        grid, meta, nbb = gemv("ln_fc", F)
        launches.append(Launch("ln_fc", KERNELS["ln_fc"], grid, (
            ws.x, lw.ln2_w, lw.ln2_b, lw.fc_w, lw.fc_b, *fc_c, ws.h, B, nbb, w.eps),
            {"E": E, "F": F, "BE": BE, **meta, **ln_folding}))
        grid, meta, nbb = gemv("fc2", E)
        launches.append(Launch("fc2", KERNELS["fc2"], grid, (
            ws.h, lw.fc2_w, lw.fc2_b, ws.x, x_out, B, nbb), {"E": E, "F": F, **meta}))
    grid, meta, nbb = gemv("lm_head", V)
    if prefetch and C.sum_once(str(w.dtype), E, card):  # over K once, on the cards where that measured faster
        meta["SUM_ONCE"] = True
    # the argmax over the candidates: its own launch, or (folded) lm_head's last program's, AB batch rows at a time
    ws.lm_done = torch.zeros(1 if argmax_fold else 0, dtype=torch.int32, device=dev)
    if argmax_fold:
        meta |= {"ARGMAX_FOLD": True, "NB": B, "AB": am.BB, "BP": C.next_pow2(nblk)}
    launches.append(Launch("lm_head", KERNELS["lm_head"], grid, (
        ws.x, w.ln_f_w, w.ln_f_b, w.wte, ws.logits, ws.lm_val, ws.lm_idx, B, nbb, w.eps,
        state.tok, state.out, state.pos, new_pos, L, ws.lm_done),
        {"E": E, "V": V, "NBLK": nblk, "BE": BE, **meta}))
    if not argmax_fold:
        launches.append(Launch("argmax", KERNELS["argmax"], (1,), (
            ws.lm_val, ws.lm_idx, state.tok, state.out, state.pos, new_pos, L),
            {"B": B, "NBLK": nblk, "BB": am.BB, "BP": C.next_pow2(nblk), "num_warps": am.num_warps, **common}))
    return made(launches)


def _constexprs(kernel: Any) -> set[str]:
    """The compile-time switches (tl.constexpr parameters) a Triton kernel takes: a JIT function's own list, or, in
    Triton's interpreter (an InterpretedFunction has none), its Python function's annotated signature."""
    if kernel is None:
        return set()
    if hasattr(kernel, "params"):
        return {p.name for p in kernel.params if p.is_constexpr}
    return {name for name, p in inspect.signature(kernel.fn).parameters.items() if "constexpr" in str(p.annotation)}


# Triton's launch options a switch may also name (not constexprs; every Triton launch takes them): `maxnreg`, a cap on a
# thread's registers (ptxas spills beyond it), so that more programs fit an SM. Triton's interpreter ignores it.
LAUNCH_OPTIONS = frozenset({"maxnreg"})


def with_switches(plan: FusedPlan, switches: dict[str, dict[str, int]]) -> FusedPlan:
    """`plan` with compile-time switches bound on its launches, by kernel name (configs.ALL_KERNELS: every launch whose
    kernel takes it), as a per-shape table in lab.step.fused.configs would bind them: what `python -m lab.step.fused.ab`
    times and the fused checks run (e.g. {"ln_qkv": {"KV_L2": 1}}); a switch may also be a launch option
    (LAUNCH_OPTIONS, e.g. {"ln_qkv": {"maxnreg": 96}}). ValueError naming a switch no launch takes."""
    bound: set[tuple[str, str]] = set()
    launches: list[Launch | LibraryCall] = []
    for launch in plan.launches:
        meta = dict(getattr(launch, "meta", {}))
        takes = _constexprs(getattr(launch, "kernel", None)) | (LAUNCH_OPTIONS if isinstance(launch, Launch) else set())
        for kernel, by_name in switches.items():
            if kernel not in (C.ALL_KERNELS, launch.name):
                continue
            for key, value in by_name.items():
                if key in takes:
                    meta[key] = value
                    bound.add((kernel, key))
        launches.append(replace(launch, meta=meta) if isinstance(launch, Launch) and meta != launch.meta else launch)
    missing = sorted(f"{k}:{s}" for k, by_name in switches.items() for s in by_name if (k, s) not in bound)
    if missing:
        raise ValueError(f"no launch of this plan takes {', '.join(missing)}")
    return replace(plan, launches=launches)


def ln_folded(weight: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(c1, c2) = (W g, W beta + bias) in fp32, summed in float64 and rounded once: what the PREFETCH kernels fold a
    layer norm into (layer_norm(x) @ W.T + bias = rstd ((x g) @ W.T - mean c1) + c2: projections._ln_gemv_one).
    Two fp32 vectors the length of W's rows, made once when the plan is bound."""
    w64 = weight.to(torch.float64)
    return ((w64 @ g.to(torch.float64)).to(torch.float32),
            (w64 @ beta.to(torch.float64) + bias.to(torch.float64)).to(torch.float32))


# Whether a PDL plan folds the attention into ln_qkv unless told (prepare's fold=None). Measured on an H200
# (2026-12-03, the tuner's repeatable plans, GPT-2 124M and 1.5B, fp32 and bf16, batch 1, medians of 5-7 rounds
# of `do_bench_cudagraph`): with PDL the folded step took 0.87-0.98 of the five-kernel step's time in all eight
# cases (fused-pdl and fused-pdl-prefetch), with ln_qkv's tiles retuned for it (configs.TUNED_PREFETCH); without
# PDL it took 1.01 at 124M fp32 and 0.87-0.90 elsewhere, so the plain `fused` method keeps five kernels a layer: the
# step that lab.experiments.fused_anatomy takes apart.
FOLD_WITH_PDL = True


def folds(fold: bool | None, pdl: bool) -> bool:
    """Whether a plan asks to fold the attention into ln_qkv: `fold` where given, else FOLD_WITH_PDL with PDL."""
    return pdl and FOLD_WITH_PDL if fold is None else fold

# Plans made on demand by fused_step(state, weights), one per (state, weights, pdl, prefetch), dropped
# with the state object (weakly referenced, so a cached plan never keeps a 1 GB cache alive).
_PLANS: dict[tuple[int, bool, bool], FusedPlan] = {}


def plan_for(state: DecodeState, w: Weights, pdl: bool = False, prefetch: bool = False) -> FusedPlan:
    """The cached plan of this state and these weights (made, outside any capture, on first use)."""
    key = (id(state), pdl, prefetch)
    plan = _PLANS.get(key)
    if plan is None or not plan.binds(state, w):
        plan = _PLANS[key] = prepare(state, w, pdl=pdl, prefetch=prefetch)
        weakref.finalize(state, _PLANS.pop, key, None)
    return plan


def plan_bound_to(state: Any) -> FusedPlan | None:
    """The cached plan made for `state` (by `plan_for`, when its method was built), or None."""
    return next((p for (sid, _, _), p in list(_PLANS.items()) if sid == id(state) and p.state_ref() is state), None)


def fused_step(state: DecodeState, w: Weights | FusedPlan) -> torch.Tensor:
    """One greedy step, hand-fused (the `fused` method). Returns the workspace's logits [B, V]."""
    plan = w if isinstance(w, FusedPlan) else plan_for(state, w)
    if isinstance(w, FusedPlan) and plan.state_ref() is not state:
        raise ValueError("fused_step: this plan was prepared for another DecodeState")
    return plan()


def fused_step_pdl(state: DecodeState, w: Weights | FusedPlan) -> torch.Tensor:
    """The same step with programmatic dependent launch (the `fused-pdl` method; Hopper+ only)."""
    if isinstance(w, FusedPlan):
        if not w.pdl:
            raise ValueError("fused_step_pdl: this plan was prepared without pdl=True")
        return fused_step(state, w)
    return plan_for(state, w, pdl=True)()


def fused_step_pdl_prefetch(state: DecodeState, w: Weights | FusedPlan) -> torch.Tensor:
    """PDL with every weight read before the wait (the `fused-pdl-prefetch` method; Hopper+ only)."""
    if isinstance(w, FusedPlan):
        if not (w.pdl and w.prefetch):
            raise ValueError("fused_step_pdl_prefetch: this plan was prepared without pdl=True, prefetch=True")
        return fused_step(state, w)
    return plan_for(state, w, pdl=True, prefetch=True)()


def bind(state: DecodeState, w: Weights, pdl: bool = False, prefetch: bool = False) -> Callable[..., torch.Tensor]:
    """The step bound to `state` (lab.step.methods' `bind` hook): the plan is prepared now, before any
    capture, and the returned function runs it (its arguments are those of every step function)."""
    plan = plan_for(state, w, pdl=pdl, prefetch=prefetch)

    def fused(s: DecodeState, _w: Weights) -> torch.Tensor:
        if s is not state:
            raise ValueError("fused step: bound to another DecodeState")
        return plan()

    fused.plan = plan  # type: ignore[attr-defined]
    return fused
