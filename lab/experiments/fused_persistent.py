"""fused_persistent: the fused step with one persistent kernel per layer, beside the five-kernel step (issue 31).

lab.step.fused.persistent makes each layer's five kernels one launch whose phases a grid barrier separates: 14
launches a step at GPT-2 124M instead of 62. This experiment asks whether that pays, at each size and dtype asked,
with grids of one and two programs an SM (where the device holds them).

A grid barrier hangs the GPU when a program of the grid cannot start, so everything that launches the kernel runs
in a child process with a watchdog (lab.run.childproc: killed, with everything it started, after `timeout_s`): a
hang is this experiment FAILED with the watchdog's words, never a stuck run. A grid larger than the device holds at
once (the compiled kernel's registers and shared memory against the device's limits, as torch reports them) is not
launched: that part is NOT_RUN with the count. A batch the rule (lab.step.fused.rule) gives the library-GEMM path is
NOT_RUN too: the persistent kernel is the GEMV path's.

Correctness, outside the timing, in the same child: fp32, the persistent step's tokens are the five-kernel step's
and eager's, its logits within 1e-4 of the largest of the five-kernel step's (fatal; bit-identical in Triton's
interpreter, but on the GPU each phase compiles at the layer kernel's warps, so reductions may round differently:
the H200 of 2026-12-03 gave 1.3e-5), and a graph replay gives the direct step's, bit for bit; bf16, the teacher-
forced rule of tests/test_fused.py (no worse than 1.5x the eager bf16 step's own error). Timing: every variant's plan on one mid-decode state (repeatable: the
same work each replay), captured in a CUDA graph, replayed `iters` times a round in rotating rounds with CUDA events;
step_ms per variant with its rounds, speedup_vs_fused (the fastest five-kernel variant's median over the persistent
step's, interval paired over rounds), mbu against the copy bandwidth measured here.

    python -m lab run --profile gpu --only fused_persistent --out <dir>
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

from lab.contract import intervals, metrics as M, notes as N
from lab.contract.names import Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common.sweep import copy_bandwidth
from lab.run.childproc import run_child
from lab.run.context import Context
from lab.run.runner import NotRun

CHILD = "lab.experiments.fused_persistent:child_measure"
# the launch-per-kernel step's variants timed beside it, as their methods run them (fused: five kernels a layer;
# fused-pdl-prefetch: four, the attention folded into ln_qkv, lab.step.fused.step.FOLD_WITH_PDL)
FIVE = ("fused", "fused-pdl-prefetch")
# tests/test_fused.py's GPU rules: fp32 logits within 1e-4 of the largest; bf16 (GPT-2's 12-48 layers: the absolute
# error is whatever bf16 gives) no worse than 1.5x the eager bf16 step's own error
FP32_REL, BF16_VS_EAGER = 1e-4, 1.5


@dataclass(frozen=True)
class Options:
    sizes: tuple[Literal["gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B"], ...] = option(
        ("gpt2-124M", "gpt2-1.5B"), "model shapes (random weights)")
    dtypes: tuple[Literal["float32", "bfloat16"], ...] = option(("float32", "bfloat16"), "dtypes")
    batch: int = option(1, "batch rows", minimum=1)
    max_len: int = option(256, "cache slots (the timed step's position is lab.step.fused.tune's, mid-decode)",
                          minimum=16)
    programs_per_sm: tuple[int, ...] = option((1, 2), "grids of the persistent kernel, in programs an SM", minimum=1)
    num_warps: int = option(0, "the layer kernel's warps (0: the most of the five kernels' configs)", minimum=0)
    wide: bool = option(False, "also each grid with wide tiles (lab.step.fused.persistent.wide_configs: at most one "
                               "task a program in each phase; not yet run on a GPU)")
    check_steps: int = option(16, "steps of the correctness checks", minimum=1)
    iters: int = option(20, "graph replays timed per round", minimum=1)
    warmup: int | None = option(None, "untimed replays before each turn (default: the profile's warmup)",
                                profile="warmup")
    rounds: int | None = option(None, "timing rounds, variants in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    timeout_s: float = option(420.0, "the watchdog: the child process is killed after this many seconds", minimum=1.0)


def run(ctx: Context[Options]) -> None:
    if ctx.device.type != "cuda":
        raise NotRun(Code.NO_CUDA, "the persistent kernel's grid barrier needs a GPU: run `python -m lab run "
                                   "--profile gpu --only fused_persistent` on a host with an NVIDIA GPU")
    o = ctx.options
    bandwidth = copy_bandwidth(ctx)
    kwargs = {**asdict(o), "device": str(ctx.device), "warmup": o.warmup or 0, "rounds": o.rounds or 1}
    with ctx.activity(f"the persistent step in a child process (watchdog {o.timeout_s:.0f} s)"):
        child = run_child(CHILD, kwargs, timeout_s=o.timeout_s)
    if child.value is None:
        raise RuntimeError("the child process measuring the persistent step did not finish" + (
            f" within the watchdog's {o.timeout_s:.0f} s: a grid barrier that never opens hangs the GPU, and the "
            "watchdog killed it" if child.timed_out else "") + f" ({child.describe()})")
    record(ctx, child.value, bandwidth)


def record(ctx: Any, value: dict[str, Any], bandwidth: float) -> None:
    """What the child measured, into the record: parts not run, checks, timings, speedups, MBU."""
    for item in value["not_run"]:
        ctx.skip(item["item"], Code(item["code"]), item["reason"])
    for case in value["cases"]:
        params = {k: case[k] for k in (P.SIZE, P.DTYPE, P.BATCH)}
        ctx.metric(M.PERSISTENT_PROGRAMS, case["max_programs"], **params)
        ctx.note(N.OCCUPANCY.key_for(*params.values()), case["occupancy"])
        for grid, check in case["checks"].items():
            where = {**params, P.VARIANT: grid}
            if case[P.DTYPE] == "float32":
                five = check["five"]
                ctx.check("fp32: the five-kernel step's tokens and logits (within 1e-4 of the largest) at every step",
                          all(s["tokens_equal"] and s["logit_diff"] <= FP32_REL * s["logit_scale"] for s in five),
                          detail=f"largest difference {max(s['logit_diff'] for s in five):.3g}; bit-identical at "
                          f"{sum(s['identical'] for s in five)} of {len(five)} steps", fatal=True, **where)
                ctx.check("fp32 greedy tokens equal eager's", check["tokens_equal"], fatal=True, **where)
                ctx.check("a CUDA graph's replay gives the direct step's logits and tokens, bit for bit",
                          check["replay_identical"], fatal=True, **where)
                ctx.metric(M.MAX_LOGIT_DIFF, check["max_logit_diff"], **where)
            else:
                err, eager = max(check["fused_err"]), max(check["eager_err"])
                ctx.check("bf16 teacher-forced: no worse than 1.5x eager bf16's own error against the fp32 reference",
                          err <= BF16_VS_EAGER * eager and all(check["bookkeeping_ok"]),
                          detail=f"largest error {err:.4g}, eager bf16's {eager:.4g}", fatal=True, **where)
                ctx.metric(M.MAX_LOGIT_DIFF, err, **where)
        rounds = case["rounds"]
        median = {v: statistics.median([x for r in per_round for x in r]) for v, per_round in rounds.items()}
        for variant, per_round in rounds.items():
            ctx.timing(M.STEP_MS, per_round, **params, **{P.VARIANT: variant})
            ctx.metric(M.MBU, round(case["bytes"] / (median[variant] * 1e-3) / (bandwidth * 1e9), 4), **params,
                       **{P.VARIANT: variant})
        best = min((v for v in FIVE if v in rounds), key=median.__getitem__)
        for variant in (v for v in rounds if v not in FIVE):
            ci = intervals.ratio_interval(rounds[best], rounds[variant], paired=True)
            where = {**params, P.VARIANT: variant}
            ctx.metric(M.SPEEDUP_VS_FUSED, round(median[best] / median[variant], 4), **where)
            ctx.metric(M.SPEEDUP_VS_FUSED_CI_LOW, None if ci is None else round(ci.low, 4), **where)
            ctx.metric(M.SPEEDUP_VS_FUSED_CI_HIGH, None if ci is None else round(ci.high, 4), **where)
        ctx.metric(M.BYTES_PER_STEP, case["bytes"], **params)


# ------------------------------------------------------------------ the child process (it launches the kernel)

def child_measure(device: str, sizes: list[str], dtypes: list[str], batch: int, max_len: int,
                  programs_per_sm: list[int], check_steps: int, iters: int, warmup: int, rounds: int,
                  num_warps: int = 0, wide: bool = False, timeout_s: float = 0.0) -> dict[str, Any]:
    """In the child: per size and dtype, the grids the device holds, the checks, then every variant timed."""
    import torch

    from lab.contract.profiles import SHAPES
    from lab.experiments.common.sweep import random_weights
    from lab.measure.timing import CudaClock, time_methods
    from lab.step.capture import capture
    from lab.step.fused import configs as C, persistent as PS, rule as R, step as S, traffic as T
    from lab.step.fused.tune import timing_state

    dev = torch.device(device)
    sms = C.device_sms(dev)
    pdl, _ = S.pdl_supported(dev)
    out: dict[str, Any] = {"cases": [], "not_run": []}
    for size in sizes:
        for dtype in dtypes:
            w = random_weights(SHAPES[size], dev, dtype)
            label = f"{size} {dtype} batch {batch}"
            choice = R.choose(batch, w.n_embd, str(w.dtype), False, {})
            if choice.path != R.Path.GEMV:
                out["not_run"].append({"item": label, "code": Code.NOT_APPLICABLE.value, "reason": (
                    f"the rule gives this batch the {choice.path} path ({choice.reason}); the persistent kernel is the "
                    "GEMV path's")})
                continue
            state = timing_state(w, batch, max_len)
            most, how = PS.guard(PS.prepare(state, w, programs=sms, repeatable=True, num_warps=num_warps or None))
            grids = [k * sms for k in programs_per_sm if k * sms <= most]
            for k in (k for k in programs_per_sm if k * sms > most):
                out["not_run"].append({"item": f"{label}, {k * sms} programs", "code": Code.NOT_ON_THIS_DEVICE.value,
                                       "reason": f"the device holds {most} programs of the layer kernel at once ({how}):"
                                                 f" a barrier over {k * sms} would wait for programs that cannot start"})
            case: dict[str, Any] = {P.SIZE: size, P.DTYPE: dtype, P.BATCH: batch, "max_programs": most,
                                    "occupancy": how, "checks": {}}
            w32 = w if dtype == "float32" else random_weights(SHAPES[size], dev, "float32")
            case["checks"] = checks(w, w32, batch, check_steps, grids, num_warps, wide)
            w32 = None
            plans: dict[str, Any] = {"fused": S.prepare(state, w, repeatable=True, path="gemv")}
            if pdl:
                plans["fused-pdl-prefetch"] = S.prepare(state, w, pdl=True, prefetch=True, repeatable=True,
                                                        path="gemv")
            for P_ in grids:
                plans[f"fused-persistent-{P_}"] = PS.prepare(state, w, programs=P_, repeatable=True,
                                                             num_warps=num_warps or None)
                if wide:
                    tiles = PS.wide_configs(w.n_embd, int(w.wte.shape[0]), batch, P_, num_warps or 8)
                    plans[f"fused-persistent-{P_}-wide"] = PS.prepare(state, w, programs=P_, repeatable=True,
                                                                      num_warps=num_warps or None, overrides=tiles)
            graphs = {name: capture(plan, warmup=2) for name, plan in plans.items()}
            case["rounds"] = time_methods({name: g.replay for name, g in graphs.items()}, CudaClock(), rounds, iters,
                                          warmup)
            case["launches"] = {name: len(plan.launches) for name, plan in plans.items()}
            case["bytes"] = sum(c.total for c in T.calls(T.Shape.of(w, batch, max_len),
                                                         T.Layout.of_plan(plans["fused"]), int(state.pos.item())))
            out["cases"].append(case)
            del graphs, plans, state, w
            torch.cuda.empty_cache()
    return out


def checks(w: Any, w32: Any, batch: int, steps: int, grids: list[int], num_warps: int = 0,
           wide: bool = False) -> dict[str, dict[str, Any]]:
    """Per grid, outside any timing: fp32, bit-identity with the five-kernel step, eager's tokens and a graph replay
    identical to the direct step; bf16, the teacher-forced run (lab.step.fused.check)."""
    from lab.step.fused import check as K

    out: dict[str, dict[str, Any]] = {}
    from lab.step.fused import persistent as PS

    variants: list[tuple[str, dict[str, Any]]] = [(f"fused-persistent-{p}", {"programs": p, "num_warps": num_warps or None})
                                                  for p in grids]
    if wide:
        variants += [(f"fused-persistent-{p}-wide", {"programs": p, "num_warps": num_warps or None, "overrides":
                      PS.wide_configs(w.n_embd, int(w.wte.shape[0]), batch, p, num_warps or 8)}) for p in grids]
    for grid, persistent in variants:
        if w.dtype == w32.dtype:
            run = K.free_running(w, batch, steps, persistent=persistent, graph=True)
            out[grid] = {"five": K.same_as_five(w, batch, steps, persistent),
                         "tokens_equal": all(s["tokens_equal"] and s["out_equal"] for s in run["per_step"]),
                         "replay_identical": run["graph"]["logits_identical_direct"] and run["graph"]["out_equal_direct"],
                         "max_logit_diff": max(s["logit_diff"] for s in run["per_step"]),
                         "launches": run["kernels_per_step"]}
        else:
            out[grid] = K.teacher_forced(w32, w, batch, steps, persistent=persistent)
    return out


def child_checks(device: str, size: str, dtype: str, batch: int, steps: int, programs_per_sm: list[int]) -> dict[str, Any]:
    """In a child (tests/test_fused_persistent.py's CUDA test): `checks` at one shape, every grid the device holds."""
    import torch

    from lab.contract.profiles import SHAPES
    from lab.experiments.common.sweep import random_weights
    from lab.step.fused import configs as C, persistent as PS
    from lab.step.fused.tune import timing_state

    dev = torch.device(device)
    w = random_weights(SHAPES[size], dev, dtype)
    w32 = w if dtype == "float32" else random_weights(SHAPES[size], dev, "float32")
    sms = C.device_sms(dev)
    most, how = PS.guard(PS.prepare(timing_state(w, batch, 64), w, programs=sms, repeatable=True))
    return {"max_programs": most, "occupancy": how, "sms": sms,
            "checks": checks(w, w32, batch, steps, [k * sms for k in programs_per_sm if k * sms <= most])}
