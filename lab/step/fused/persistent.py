"""The fused step with one persistent kernel per layer (`fused-persistent`): 14 launches instead of 62.

`layer_kernel` does a layer's five kernels (lab.step.fused.projections, lab.step.fused.attention) in one launch of
P programs, P at most what the device holds at once: each phase's tasks (a task is what one program of the
five-kernel step does, with that kernel's tuned tile) are dealt to the programs in turn, and a grid barrier
(lab.step.fused.grid) separates the phases, where the step separates kernels:

    phase 1  ln_qkv     tasks cdiv(3E, BN) x cdiv(B, BB)     (no wait: the launch follows the previous layer)
    phase 2  attention  tasks B x H x splits                 after every program's phase 1
    phase 3  proj       tasks cdiv(E, BN) x cdiv(B, BB)      loads its first task's first weight tile, then waits
    phase 4  ln_fc      tasks cdiv(4E, BN) x cdiv(B, BB)     likewise
    phase 5  fc2        tasks cdiv(E, BN) x cdiv(B, BB)      likewise

so four barriers a layer take the place of four kernel boundaries (a graph node's launch, the grid's ramp-up
and drain, the wait on the previous kernel), and a program's first weight tile of phases 3-5 is in flight while
it waits. Within a phase a program loads its next task's first tile before it works on the current one (one
task's weights always in flight: a program walks several tasks in turn where the five-kernel step ran them as
separate programs side by side). lm_head and the argmax stay the step's own two launches: 12 + 2 = 14 launches
at GPT-2 124M.

Same contract as lab.step.fused.step (a FusedPlan: no host synchronisation, no allocation after `prepare`,
capturable; the same arithmetic in the same order, so fp32 logits match the five-kernel step's). Only the GEMV
path (the batches lab.step.fused.rule gives it); no PDL and no PREFETCH inside the kernel (the barrier takes
their place).

A grid barrier hangs the GPU if a program is never scheduled, so `prepare` sizes the grid from the compiled
kernel's occupancy (`max_programs`) and the lab runs this step only in a child process with a watchdog
(lab.experiments.fused_persistent). `stepped=True` launches the kernel once per phase with no barrier (five
launches a layer): what Triton's interpreter can run with several programs (it runs programs one after another,
so a barrier there works with one program only), and what the tests compare with the barrier's launches.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from lab.step.decode import DecodeState
from lab.step.fused import configs as C, rule as R, step as S
from lab.step.fused.attention import _attention
from lab.step.fused.grid import _arrive, _leave, _wait
from lab.step.fused.launch import Launch
from lab.step.fused.projections import _fc2, _first_tile, _ln_fc, _ln_qkv, _proj
from lab.step.model import Weights

PHASES = ("ln_qkv", "attention", "proj", "ln_fc", "fc2")  # a layer's kernels, in the order the phases run them


@triton.jit
def layer_kernel(x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln1_w, ln1_b, attn_w, attn_b, q_ptr, cache_ptr,
                 part_o, part_m, part_l, proj_w, proj_b, x_out, ln2_w, ln2_b, fc_w, fc_b, h_ptr, fc2_w, fc2_b,
                 bar_ptr, B, L, eps, scale, P, NBB_A, NBB_C, NBB_D, NBB_E,
                 E: tl.constexpr, H: tl.constexpr, DH: tl.constexpr, F: tl.constexpr, EMBED: tl.constexpr,
                 BE: tl.constexpr, NS: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
                 BB_A: tl.constexpr, BN_A: tl.constexpr, BK_A: tl.constexpr,
                 BB_C: tl.constexpr, BN_C: tl.constexpr, BK_C: tl.constexpr,
                 BB_D: tl.constexpr, BN_D: tl.constexpr, BK_D: tl.constexpr,
                 BB_E: tl.constexpr, BN_E: tl.constexpr, BK_E: tl.constexpr, ONLY: tl.constexpr = 0):
    """One layer of the decode step in one launch of P programs (the module docstring); ONLY = k (1-5) runs phase k
    alone with no barrier (the stepped plan), 0 every phase with the grid barrier between them."""
    pid = tl.program_id(0)  # its tasks: pid, pid + P, ... (while loops: the interpreter's range wants constant bounds)
    GRID: tl.constexpr = ONLY == 0
    if ONLY == 0 or ONLY == 1:
        tasks = (3 * E + BN_A - 1) // BN_A * NBB_A
        w_next = _first_tile(pid, attn_w, NBB_A, B, 3 * E, E, BB_A, BN_A, BK_A)
        t = pid
        while t < tasks:  # each task's first tile was loaded during the previous one
            w_now = w_next
            w_next = _first_tile(t + P, attn_w, NBB_A, B, 3 * E, E, BB_A, BN_A, BK_A)
            _ln_qkv(t, x_ptr, tok_ptr, wte_ptr, wpe_ptr, pos_ptr, ln1_w, ln1_b, attn_w, attn_b, attn_b, attn_b, q_ptr,
                    cache_ptr, B, NBB_A, L, eps, E, H, DH, EMBED, BB_A, BN_A, BK_A, BE, False, False, 0, w_now, True)
            t += P
    if GRID:
        _arrive(bar_ptr)
        _wait(bar_ptr, P)
    if ONLY == 0 or ONLY == 2:
        t = pid
        while t < B * H * NS:
            _attention(t, q_ptr, cache_ptr, pos_ptr, part_o, part_m, part_l, B, L, scale, E, H, DH, NS, BS, BD,
                       False, False, False, 0)
            t += P
    if GRID:
        _arrive(bar_ptr)
    if ONLY == 0 or ONLY == 3:
        tasks = (E + BN_C - 1) // BN_C * NBB_C
        w_next = _first_tile(pid, proj_w, NBB_C, B, E, E, BB_C, BN_C, BK_C)  # in flight while the program waits
        if GRID:
            _wait(bar_ptr, 2 * P)
        t = pid
        while t < tasks:
            w_now = w_next
            w_next = _first_tile(t + P, proj_w, NBB_C, B, E, E, BB_C, BN_C, BK_C)
            _proj(t, part_o, part_m, part_l, proj_w, proj_b, x_ptr, x_out, B, NBB_C, E, H, DH, NS, BB_C, BN_C, BK_C,
                  False, False, 0, w_now, True)
            t += P
    if GRID:
        _arrive(bar_ptr)
    if ONLY == 0 or ONLY == 4:
        tasks = (F + BN_D - 1) // BN_D * NBB_D
        w_next = _first_tile(pid, fc_w, NBB_D, B, F, E, BB_D, BN_D, BK_D)
        if GRID:
            _wait(bar_ptr, 3 * P)
        t = pid
        while t < tasks:
            w_now = w_next
            w_next = _first_tile(t + P, fc_w, NBB_D, B, F, E, BB_D, BN_D, BK_D)
            _ln_fc(t, x_ptr, ln2_w, ln2_b, fc_w, fc_b, fc_b, fc_b, h_ptr, B, NBB_D, eps, E, F, BB_D, BN_D, BK_D, BE,
                   False, False, 0, w_now, True)  # (the folded layer norm's c1, c2 are the PREFETCH path's: not read)
            t += P
    if GRID:
        _arrive(bar_ptr)
    if ONLY == 0 or ONLY == 5:
        tasks = (E + BN_E - 1) // BN_E * NBB_E
        w_next = _first_tile(pid, fc2_w, NBB_E, B, E, F, BB_E, BN_E, BK_E)
        if GRID:
            _wait(bar_ptr, 4 * P)
        t = pid
        while t < tasks:
            w_now = w_next
            w_next = _first_tile(t + P, fc2_w, NBB_E, B, E, F, BB_E, BN_E, BK_E)
            _fc2(t, h_ptr, fc2_w, fc2_b, x_ptr, x_out, B, NBB_E, E, F, BB_E, BN_E, BK_E, False, False, 0, w_now, True)
            t += P
    if GRID:
        _leave(bar_ptr, P)


def occupancy(n_regs: int, shared_bytes: int, num_warps: int, regs_per_sm: int = 65536,
              shared_per_sm: int = 228 * 1024, max_warps: int = 64, max_blocks: int = 32) -> int:
    """Programs of a compiled kernel one SM holds at once (registers allocated per warp in units of 256, Hopper's
    limits by default): what a grid barrier may rely on."""
    per_warp = math.ceil(max(n_regs, 1) * 32 / 256) * 256
    by_regs = regs_per_sm // (per_warp * num_warps)
    by_shared = shared_per_sm // shared_bytes if shared_bytes > 0 else max_blocks
    return max(0, min(by_regs, by_shared, max_warps // num_warps, max_blocks))


def max_programs(launch: Launch, sms: int) -> tuple[int, str]:
    """How many programs of `launch`'s kernel the device holds at once, from its compiled registers and shared
    memory and the device's limits as torch reports them, and how that was found."""
    props = torch.cuda.get_device_properties(launch.args[0].device)
    compiled = launch.kernel.warmup(*launch.args, grid=launch.grid, **launch.meta)
    compiled._init_handles()  # loads the cubin: what sets n_regs (Triton 3.6 fills it lazily)
    per_sm = occupancy(int(compiled.n_regs), int(compiled.metadata.shared), int(launch.meta["num_warps"]),
                       int(getattr(props, "regs_per_multiprocessor", 65536)),
                       int(getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)),
                       int(getattr(props, "max_threads_per_multi_processor", 2048)) // 32)
    return per_sm * sms, (f"{compiled.n_regs} registers a thread, {compiled.metadata.shared} B shared, "
                          f"{launch.meta['num_warps']} warps: {per_sm} programs an SM x {sms} SMs")


def wide_configs(n_embd: int, vocab: int, batch: int, programs: int, num_warps: int = 8,
                 per_thread: int = 16) -> dict[str, C.Config]:
    """GEMV tiles for the layer kernel that give each phase at most `programs` tasks (BN the smallest power of two
    that does), so that no program walks two tasks of a phase in turn; BK as much of K as keeps the tile within
    `per_thread` values a thread (the rest of K in chunks). Overrides for `prepare`."""
    out: dict[str, C.Config] = {}
    for name, (N, K) in C.gemv_shapes(n_embd, vocab).items():
        if name == "lm_head":
            continue
        BB = min(C.next_pow2(batch), 4)
        BN = 1
        while C.cdiv(N, BN) * C.cdiv(batch, BB) > programs:
            BN *= 2
        BK = max(16, min(C.next_pow2(K), per_thread * 32 * num_warps // (BB * BN)))
        out[name] = C.GemvConfig(BB, BN, BK, num_warps)
    return out


def prepare(state: DecodeState, w: Weights, programs: int | None = None, repeatable: bool = False,
            stepped: bool = False, sms: int | None = None, overrides: dict[str, C.Config] | None = None,
            num_warps: int | None = None) -> S.FusedPlan:
    """The persistent plan: the five-kernel plan's configs, workspace, lm_head and argmax (lab.step.fused.step.prepare
    on the GEMV path), each layer's five launches made one `layer_kernel` launch of `programs` programs (default:
    one an SM). `stepped`: five launches a layer, one per phase, no barrier (the interpreter's way). `num_warps`:
    the kernel's (one for every phase; default the largest of the five kernels' tuned configs)."""
    base = S.prepare(state, w, sms=sms, overrides=overrides, repeatable=repeatable, path=R.Path.GEMV,
                     argmax_fold=False)
    sms = base.sms
    P = programs or sms
    if P < 1:
        raise ValueError(f"fused-persistent: {P} programs")
    cfg = base.configs
    gemv = {k: cfg[k] for k in ("ln_qkv", "proj", "ln_fc", "fc2")}
    att = cfg["attention"]
    assert isinstance(att, C.AttentionConfig) and all(isinstance(g, C.GemvConfig) for g in gemv.values())
    warps = num_warps or max([att.num_warps] + [g.num_warps for g in gemv.values()])  # type: ignore[union-attr]
    # registers for the grid's programs an SM (two at least): left to itself, ptxas gave the bf16 kernel at 8 warps 80
    # registers and 12 B of spills (Triton 3.6, sm_90); capped at 128 it takes 96 and spills nothing (lab.step.fused.aot)
    per_sm = max(2, C.cdiv(P, sms))
    maxnreg = min(255, 65536 // (32 * warps * per_sm) // 8 * 8)
    ws = base.workspace
    ws.barrier = torch.zeros(2, dtype=torch.int32, device=w.device)
    B, L, E, H = state.batch, state.max_len, w.n_embd, w.n_head
    DH = E // H
    NS = C.cdiv(L, att.BS)
    x_out = ws.x_scratch if repeatable else ws.x
    tiles: dict[str, Any] = {}
    for key, name in zip("ACDE", ("ln_qkv", "proj", "ln_fc", "fc2")):
        g = gemv[name]
        assert isinstance(g, C.GemvConfig)
        tiles |= {f"BB_{key}": g.BB, f"BN_{key}": g.BN, f"BK_{key}": g.BK}
    nbb = [C.cdiv(B, tiles[f"BB_{k}"]) for k in "ACDE"]
    launches: list[Any] = []
    for i, lw in enumerate(w.layers):
        args = (ws.x, state.tok, w.wte, w.wpe, state.pos, lw.ln1_w, lw.ln1_b, lw.attn_w, lw.attn_b, ws.q,
                state.caches[i], ws.part_o, ws.part_m, ws.part_l, lw.proj_w, lw.proj_b, x_out, lw.ln2_w, lw.ln2_b,
                lw.fc_w, lw.fc_b, ws.h, lw.fc2_w, lw.fc2_b, ws.barrier, B, L, w.eps, 1.0 / math.sqrt(DH),
                P, *nbb)
        meta = {"E": E, "H": H, "DH": DH, "F": 4 * E, "EMBED": i == 0, "BE": C.next_pow2(E), "NS": NS,
                "BS": att.BS, "BD": C.next_pow2(DH), **tiles, "num_warps": warps, "maxnreg": maxnreg}
        for only in (range(1, len(PHASES) + 1) if stepped else (0,)):
            launches.append(Launch("layer" if not stepped else f"layer:{PHASES[only - 1]}", layer_kernel, (P,), args,
                                   {**meta, "ONLY": only}))
    launches += base.launches[-2:]  # lm_head, argmax: the five-kernel step's
    return S.FusedPlan(cfg, ws, launches, False, sms, base.state_ref, base.weights_ref, False, base.path,
                       f"{base.path_reason}; one persistent kernel a layer, {P} programs, {warps} warps"
                       + (" (stepped: a launch per phase, no barrier)" if stepped else ""))


def guard(plan: S.FusedPlan) -> tuple[int, str]:
    """(the most programs the device holds at once for the plan's layer kernel, how that was found); a plan whose
    grid is larger must not run (its barrier would wait for programs that cannot start)."""
    layer = next(launch for launch in plan.launches if isinstance(launch, Launch) and launch.name == "layer")
    return max_programs(layer, plan.sms)
