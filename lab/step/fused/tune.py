"""Tune the fused step's block sizes on a GPU, in one command:

    python -m lab.step.fused.tune                          # fp32 and bf16, batches 1 and 8, GPT-2 124M shapes
    python -m lab.step.fused.tune --size gpt2-1.5B --batch 1   # another GPT-2 width (the tables are keyed by it)
    python -m lab.step.fused.tune --batch 1 --dtype bfloat16 --max-seconds 120
    python -m lab.step.fused.tune --batch 1 --dtype bfloat16 --pdl --prefetch   # tune fused-pdl-prefetch as it runs
    python -m lab.step.fused.tune --batch 1 --pdl --prefetch --from-table        # start from the bound tables

The configs tuned are the gemv path's (lab.step.fused.rule), which every plan here is forced to take.

Method: coordinate descent on the *whole* captured step. For each kernel in turn (largest bytes
first), every candidate config is timed as the complete step (62 launches at 124M; 50 with PDL,
the attention folded into ln_qkv) with only that kernel's config changed, replayed from a CUDA
graph (`triton.testing.do_bench_cudagraph`, median of 10 replays of a graph holding many steps). So each candidate sees what it will see in the real step:
weights streaming from HBM (the step's 247-495 MB do not fit in L2), its neighbours, the gaps
between launches. The plan is `repeatable` (the position does not advance, the residual kernels
write a scratch copy), so every replay does the same work. A first pass varies BN and BK around
the heuristic default, a second BB (batch > 1) and num_warps around the best. `--from-table` starts the descent
from the configs the step binds now (the tuned tables, where they have an entry) instead of the heuristics, so
each kernel's first candidate is the table's: how another card would retune the tables measured on an H200.

Prints, per dtype and batch: each kernel's default and best step time and its top candidates; the
step time with the defaults, the tuned configs and the tuned configs + PDL; where the GPU time goes
(torch.profiler, per kernel kind); the distance to the weight-read floor at the measured copy
bandwidth; and the `TUNED` dict to paste into lab/step/fused/configs.py.

`--pdl` times every candidate with programmatic dependent launch on (configs tuned without PDL are
not necessarily the best with it: under PDL a kernel's weight loads overlap the previous kernel, so
larger slices per program can win); `--prefetch` tunes the PREFETCH kernels (`fused-pdl-prefetch`)
over one-chunk configs only, and prints a `TUNED_PREFETCH` dict.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from typing import Any, Callable

import torch

from lab.step import decode as D
from lab.step.fused import configs as C
from lab.step.model import LayerWeights, Weights
from lab.contract.profiles import GPT2_SIZES, ModelSpec

POSITION = 80  # mid-decode of the gpu profile (16-token prompt, 128 steps, 256 slots)
MAX_LEN = 256
TUNE_ORDER = ("lm_head", "ln_fc", "fc2", "ln_qkv", "proj", "attention", "argmax")


def random_weights(spec: ModelSpec, dtype: torch.dtype, device: str) -> Weights:
    """GPT-2-shaped random weights made on the device (values do not change a kernel's time)."""
    g = torch.Generator(device=device).manual_seed(0)
    E, F, V = spec.n_embd, 4 * spec.n_embd, spec.vocab_size

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=device) * 0.02).to(dtype)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=device, dtype=dtype)

    layers = tuple(LayerWeights(ones(E), r(E), r(3 * E, E), r(3 * E), r(E, E), r(E), ones(E), r(E), r(F, E), r(F),
                                r(E, F), r(E)) for _ in range(spec.n_layer))
    return Weights(r(V, E), r(spec.n_positions, E), layers, ones(E), r(E), spec.n_head, 1e-5)


def card_copy_gbps() -> float:
    """This card's copy rate, GB/s (read + written; lab.step.ceilings.copy_bandwidth_gbps over 1 GiB, the best of ten,
    as the lab's floor and its sweeps take it): what the tuner's fractions of the floor and the A/B tool's bounds
    (lab.step.fused.ab) are priced at."""
    from lab.step.ceilings import copy_bandwidth_gbps

    return float(max(copy_bandwidth_gbps(torch.device("cuda"), 1 << 30, repeats=10)))


def timing_state(w: Weights, batch: int, max_len: int = MAX_LEN) -> D.DecodeState:
    """A state mid-decode: random cache, random tokens, position POSITION (or mid-cache if shorter)."""
    state = D.new_state(w, batch, max_len)
    g = torch.Generator(device=w.device).manual_seed(1)
    for cache in state.caches:
        cache.copy_(torch.randn(cache.shape, generator=g, device=w.device))
    state.tok.copy_(torch.randint(0, int(w.wte.shape[0]), state.tok.shape, generator=g, device=w.device))
    state.pos.fill_(min(POSITION, max_len // 2))
    return state


def step_ms(fn: Callable[[], Any], rep_ms: int) -> float:
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))


def _pow2s(lo: int, hi: int) -> list[int]:
    """Powers of two in [lo, hi]."""
    return [1 << i for i in range(24) if lo <= 1 << i <= hi]


MAX_TILE_BYTES = 65536  # a GEMV candidate's weight tile, in the weights' own bytes (16K fp32 values, 32K bf16)


def first_pass(name: str, default: C.Config, N: int, K: int, batch: int, sms: int, max_len: int,
               prefetch: bool = False, elem_bytes: int = 4) -> list[C.Config]:
    """The default first, then candidates near it: BN and BK for a GEMV (tiles of 512 values up to MAX_TILE_BYTES
    of weights), BS for attention, BB for argmax."""
    out: list[C.Config] = []
    if isinstance(default, C.AttentionConfig):
        out = [C.AttentionConfig(bs, default.num_warps) for bs in _pow2s(16, C.next_pow2(max_len))]
        return list(dict.fromkeys([default] + out))
    if isinstance(default, C.ArgmaxConfig):
        out = [C.ArgmaxConfig(bb, default.num_warps) for bb in _pow2s(1, min(8, C.next_pow2(batch)))]
        return list(dict.fromkeys([default] + out))
    assert isinstance(default, C.GemvConfig)
    nbb = C.cdiv(batch, default.BB)
    for bn in _pow2s(1, 256):
        programs = C.cdiv(N, bn) * nbb
        if not sms // 2 <= programs <= 16 * sms:
            continue
        for bk in _pow2s(32, C.next_pow2(K)):
            if prefetch and name in C.PREFETCH_KERNELS and bk != C.next_pow2(K):
                continue  # the PREFETCH path reads its row in one chunk
            if 512 <= default.BB * bn * bk and default.BB * bn * bk * elem_bytes <= MAX_TILE_BYTES:
                out.append(replace(default, BN=bn, BK=bk))
    # nearest to the default first (log distance), at most 12
    out.sort(key=lambda c: abs(math.log2(c.BN / default.BN)) + abs(math.log2(c.BK / default.BK)))
    return list(dict.fromkeys([default] + out[:12]))


def second_pass(best: C.Config, batch: int) -> list[C.Config]:
    """Around the best of the first pass: the warps (one warp reduces a row with shuffles alone, no CTA barrier;
    more warps hold more of the tile), and BB where the batch has several rows."""
    warps = [replace(best, num_warps=nw) for nw in (1, 2, 4, 8) if nw != best.num_warps]
    if isinstance(best, C.GemvConfig) and batch > 1:
        warps += [replace(best, BB=bb) for bb in _pow2s(1, min(8, C.next_pow2(batch))) if bb != best.BB]
    return warps


def tune(w: Weights, batch: int, sms: int, rep_ms: int, deadline: float, log: Callable[[str], None],
         timer: Callable[[Any, int], float] = step_ms, max_len: int = MAX_LEN, pdl: bool = False,
         prefetch: bool = False, from_table: bool = False,
         ) -> tuple[dict[str, C.Config], dict[str, list[tuple[C.Config, float]]]]:
    """Coordinate descent over the kernels; returns the best configs and every (config, ms) tried.

    `pdl` / `prefetch`: time the plans as `fused-pdl` / `fused-pdl-prefetch` run them. `from_table`: start from
    the configs the tables bind (each kernel's first candidate), not the heuristics."""
    from lab.step.fused.step import prepare

    state = timing_state(w, batch, max_len)
    E, V = w.n_embd, int(w.wte.shape[0])
    shapes = C.gemv_shapes(E, V)
    best = C.choose(E, w.n_head, V, max_len, batch, w.dtype, sms, tuned=None if from_table else {},
                    prefetch=prefetch, card=C.device_card(w.device))
    tried: dict[str, list[tuple[C.Config, float]]] = {}

    def time_with(name: str, cfg: C.Config) -> float:
        plan = prepare(state, w, sms=sms, overrides={**best, name: cfg}, repeatable=True, pdl=pdl, prefetch=prefetch,
                       path="gemv")
        return timer(plan, rep_ms)

    def attempt(name: str, cfg: C.Config) -> None:
        if time.monotonic() > deadline:
            return
        try:
            tried[name].append((cfg, time_with(name, cfg)))
        except Exception as exc:  # a config that does not compile (registers, shared memory)
            log(f"  {name} [{_short(cfg)}]: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")

    for name in TUNE_ORDER:
        N, K = shapes.get(name, (0, 0))
        tried[name] = []
        for cfg in first_pass(name, best[name], N, K, batch, sms, max_len, prefetch, w.dtype.itemsize):
            attempt(name, cfg)
        if tried[name]:
            for cfg in second_pass(min(tried[name], key=lambda r: r[1])[0], batch):
                attempt(name, cfg)
        if not tried[name]:
            log(f"  {name:9s} not tuned (time limit, or no candidate ran): heuristic default kept")
            continue
        ranked = sorted(tried[name], key=lambda r: r[1])
        best[name] = ranked[0][0]
        log(f"  {name:9s} default {tried[name][0][1] * 1e3:7.1f} us/step  best {ranked[0][1] * 1e3:7.1f}  "
            + "  ".join(f"[{_short(c)}] {t * 1e3:.1f}" for c, t in ranked[:3])
            + ("" if time.monotonic() <= deadline else "  (time limit reached)"))
    return best, tried


def _short(cfg: C.Config) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.__dict__.items())


def breakdown(plan: Any, steps: int = 5) -> list[tuple[str, int, float]]:
    """(kernel, launches per step, GPU us per step) from torch.profiler, largest first."""
    from lab.measure import profiler_guard

    plan()
    torch.cuda.synchronize()
    with profiler_guard.session("fused breakdown", cuda=True) as prof:
        for _ in range(steps):
            plan()
        torch.cuda.synchronize()
    agg: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            us = float(e.device_time if hasattr(e, "device_time") else e.cuda_time)
            entry = agg.setdefault(e.name, [0, 0.0])
            entry[0] += 1
            entry[1] += us
    rows = [(name, int(n) // steps, us / steps) for name, (n, us) in agg.items()]
    return sorted(rows, key=lambda r: -r[2])


def report_step(w: Weights, batch: int, sms: int, best: dict[str, C.Config], rep_ms: int, bandwidth: float,
                log: Callable[[str], None], prefetch: bool = False, from_table: bool = False) -> None:
    from lab.step.fused.step import pdl_supported, prepare

    state = timing_state(w, batch)
    default = prepare(state, w, sms=sms, overrides=C.choose(w.n_embd, w.n_head, int(w.wte.shape[0]), MAX_LEN,
                                                            batch, w.dtype, sms, tuned={}), repeatable=True,
                      path="gemv")
    plans = {"default": default}
    ok, why = pdl_supported(w.device)
    # what this descent found and, from the table, the step as the tables bind it now beside it; with PDL where the
    # device has it (the plan then folds the attention into ln_qkv, step.FOLD_WITH_PDL: fewer launches). Each is its
    # own plan in its own place: a difference within the A/B tool's A/A (lab.step.fused.ab) is not the configs'
    found = {"tuned": best, **({"table": None} if from_table else {})}
    for pdl in (False, True) if ok else (False,):
        for name, overrides in found.items():
            plans[name + ("+pdl" if pdl else "") + ("+prefetch" if prefetch else "")] = prepare(
                state, w, sms=sms, overrides=overrides, repeatable=True, pdl=pdl, prefetch=prefetch, path="gemv")
    tuned = plans["tuned" + ("+prefetch" if prefetch else "")]
    times = {k: step_ms(plan, rep_ms) for k, plan in plans.items()}
    rows = C.byte_budget(w.n_layer, w.n_embd, w.n_head, int(w.wte.shape[0]), batch, w.wte.element_size(),
                         POSITION + 1, C.cdiv(MAX_LEN, best["attention"].BS),  # type: ignore[union-attr]
                         C.cdiv(int(w.wte.shape[0]), best["lm_head"].BN))  # type: ignore[union-attr]
    budget = C.budget_summary(rows, bandwidth)
    log("  step: " + ", ".join(f"{k} {v:.4f} ms ({len(plans[k].launches)} launches)" for k, v in times.items())
        + ("" if ok else f" (no PDL: {why})"))
    fastest = min(times.values())
    log(f"  floor: {budget['weight_bytes'] / 1e6:.1f} MB of weights at {bandwidth:.0f} GB/s = "
        f"{budget['weight_floor_ms']:.4f} ms; all bytes {budget['floor_ms']:.4f} ms; "
        f"fastest step = {budget['floor_ms'] / fastest:.0%} of the bandwidth bound (MBU)")
    kernels = breakdown(tuned)
    busy = sum(us for _, _, us in kernels)
    log(f"  GPU busy {busy:.1f} us of {min(times.values()) * 1e3:.1f} us (tuned step, not graphed: launch gaps "
        "larger than in a graph)")
    for name, n, us in kernels:
        log(f"    {name:32s} x{n:<3d} {us:8.1f} us  ({us / max(n, 1):.2f} us each)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.step.fused.tune", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="gpt2-124M", choices=list(GPT2_SIZES),
                   help="the GPT-2 shape whose configs are tuned (the tables are keyed by its width)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=("float32", "bfloat16"))
    p.add_argument("--rep-ms", type=int, default=10, help="milliseconds of steps per timed graph replay")
    p.add_argument("--pdl", action="store_true", help="time every candidate with PDL on (Hopper+)")
    p.add_argument("--prefetch", action="store_true", help="tune the PREFETCH kernels (one-chunk configs): "
                   "prints TUNED_PREFETCH")
    p.add_argument("--max-seconds", type=float, default=480.0,
                   help="stop trying candidates after this long (the report and the dict still print)")
    p.add_argument("--from-table", action="store_true",
                   help="start from the configs the tables bind now, not the heuristics (each kernel's first "
                        "candidate is the table's)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("lab.step.fused.tune needs a CUDA device (none visible)", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, flush=True)

    start, share = time.monotonic(), args.max_seconds / (len(args.dtype) * len(args.batch))
    sms = C.device_sms("cuda")
    bandwidth = card_copy_gbps()
    spec = GPT2_SIZES[args.size]
    log(f"{torch.cuda.get_device_name()}: {sms} SMs, copy bandwidth {bandwidth:.0f} GB/s; {spec.name} shapes, "
        f"position {POSITION} of {MAX_LEN}")
    tuned: dict[C.TunedKey, dict[str, int]] = {}
    combos = 0
    for dname in args.dtype:
        w = random_weights(spec, getattr(torch, dname), "cuda")
        for batch in args.batch:
            combos += 1
            deadline = start + combos * share  # each dtype and batch gets its share (unused time carries over)
            log(f"{dname}, batch {batch}: per kernel, the whole step's time with that kernel's candidates")
            best, _ = tune(w, batch, sms, args.rep_ms, deadline, log, pdl=args.pdl, prefetch=args.prefetch,
                           from_table=args.from_table)
            report_step(w, batch, sms, best, args.rep_ms, bandwidth, log, prefetch=args.prefetch,
                        from_table=args.from_table)
            tuned.update({(name, dname, batch, spec.n_embd): dict(cfg.__dict__) for name, cfg in best.items()})
        del w
        torch.cuda.empty_cache()
    table = "TUNED_PREFETCH" if args.prefetch else "TUNED"
    log(f"# paste into lab/step/fused/configs.py ({'tuned with PDL' if args.pdl else 'tuned without PDL'}"
        f"{', from the bound tables' if args.from_table else ''}; {torch.cuda.get_device_name()}):")
    log(f"{table}: dict[TunedKey, dict[str, int]] = {{")
    for key, value in tuned.items():
        log(f"    {key!r}: {value!r},")
    log("}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
