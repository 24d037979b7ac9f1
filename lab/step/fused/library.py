"""The fused step's gemm path: the library's GEMMs (torch.addmm) with the fused Triton row kernels around them.

Chosen by lab.step.fused.rule above a batch threshold, where the GEMV kernels would read each weight
tile once per 4-row tile. Per layer, 9 launches (4 of them the library's GEMMs, the same calls as the
eager step's `F.linear`: cuBLAS on CUDA, one read of each weight for the whole batch):

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
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lab.step.decode import DecodeState
from lab.step.fused import configs as C
from lab.step.fused.kernels import KERNELS
from lab.step.fused.launch import Launch, LibraryCall
from lab.step.model import Weights


def buffers(batch: int, w: Weights) -> dict[str, torch.Tensor]:
    """The gemm path's GEMM inputs and outputs, in the weights' dtype."""
    E, dev, dt = w.n_embd, w.device, w.dtype
    return {name: torch.zeros(batch, n, dtype=dt, device=dev)
            for name, n in (("xn", E), ("qkv", 3 * E), ("att", E), ("y", E), ("h", 4 * E))}


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

    def addmm(name: str, bias: torch.Tensor, a: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> LibraryCall:
        return LibraryCall(name, torch.addmm, (bias, a, weight.t()), {"out": out})

    nbb = C.cdiv(B, comb.BB)
    out: list[Launch | LibraryCall] = []
    for i, lw in enumerate(w.layers):
        cache = state.caches[i]
        out.append(add_ln(lw.ln1_w, lw.ln1_b, i == 0, i > 0))
        out.append(addmm("qkv_gemm", lw.attn_b, xn, lw.attn_w, qkv))
        out.append(Launch("attention", KERNELS["attention"], (B * H * NS,), (
            qkv, cache, state.pos, ws.part_o, ws.part_m, ws.part_l, B, L, 1.0 / math.sqrt(DH)),
            {"E": E, "H": H, "DH": DH, "NS": NS, "BS": att_cfg.BS, "BD": C.next_pow2(DH), "QKV": True,
             "num_warps": att_cfg.num_warps, **common}))
        out.append(Launch("combine", KERNELS["combine"], (C.cdiv(E, comb.BN) * nbb,), (
            ws.part_o, ws.part_m, ws.part_l, att, B, nbb),
            {"E": E, "H": H, "DH": DH, "NS": NS, "BB": comb.BB, "BK": comb.BN, "num_warps": comb.num_warps, **common}))
        out.append(addmm("proj_gemm", lw.proj_b, att, lw.proj_w, y))
        out.append(add_ln(lw.ln2_w, lw.ln2_b, False, True))
        out.append(addmm("fc_gemm", lw.fc_b, xn, lw.fc_w, h))
        out.append(Launch("gelu", KERNELS["gelu"], (C.cdiv(B * F, gl.BN),), (h, B * F),
                          {"BLOCK": gl.BN, "num_warps": gl.num_warps, **common}))
        out.append(addmm("fc2_gemm", lw.fc2_b, h, lw.fc2_w, y))
    out.append(add_ln(w.ln_f_w, w.ln_f_b, False, True))
    out.append(LibraryCall("lm_head_gemm", torch.mm, (xn, w.wte.t()), {"out": ws.logits}))
    nbb = C.cdiv(B, ba.BB)
    out.append(Launch("block_argmax", KERNELS["block_argmax"], (nblk * nbb,), (ws.logits, ws.lm_val, ws.lm_idx, B, nbb),
                      {"V": V, "NBLK": nblk, "BB": ba.BB, "BN": ba.BN, "num_warps": ba.num_warps, **common}))
    out.append(Launch("argmax", KERNELS["argmax"], (1,), (
        ws.lm_val, ws.lm_idx, state.tok, state.out, state.pos, new_pos, L),
        {"B": B, "NBLK": nblk, "BB": am.BB, "BP": C.next_pow2(nblk), "num_warps": am.num_warps, **common}))
    return out
