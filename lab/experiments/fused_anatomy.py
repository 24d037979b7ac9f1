"""fused_anatomy: where each ~4 us kernel of the fused step goes (issue 31: measure before acting).

Each kernel of the step (ln_qkv, attention, proj, ln_fc, fc2 of a layer, and lm_head), as the step binds it at the
size, dtype and batch asked for, is timed in the variants of lab.step.fused.stages: the full kernel, the same grid
doing nothing and one program doing nothing, the weights, the input or the stores left out, the arithmetic alone,
and under programmatic dependent launch with and without its wait. The module docstring of lab.step.fused.stages
says what each separates (launch, ramp-up and drain, the weight stream and its tail, the L2 round trip after the
wait, the reductions, the stores, the wait on the predecessor).

Method: one CUDA graph per kernel and variant holding `repeats` back-to-back launches, each bound to the next of
copies of what the kernel streams (its weight matrix, attention's cache) totalling `rotate_l2` times this device's
L2, so the bytes come from HBM as in the step; the graphs replayed in rotating rounds (lab.measure.timing), `iters`
replays a round after a warm-up; anatomy_us is a replay's time over `repeats`, with its interval and raw samples,
and stage_us the stages' costs (differences of two variants, intervals paired over rounds). Correctness outside the
timing: each kernel's full variant writes what the plan's own launch writes, bit for bit.

Then the whole step (`step`, on by default): the step as its method runs it (fused-pdl-prefetch with `prefetch`,
else fused-pdl, plain fused where PDL cannot run), each of lab.step.fused.stages.STEP_VARIANTS thrown in every launch
at once, one CUDA graph of the step each, replayed in rotating rounds: anatomy_step_us. What the chain of launches
costs with nothing to do (idle), with no weight bytes (no_weights), and without waiting (no_wait), beside the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from lab.contract import metrics as M
from lab.contract.names import Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.contract.profiles import SHAPES
from lab.experiments.common.sweep import copy_bandwidth, free_device_memory, random_weights
from lab.measure.timing import time_methods
from lab.run.context import Context
from lab.run.runner import NotRun


@dataclass(frozen=True)
class Options:
    size: Literal["gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B"] = option("gpt2-124M", "model shape")
    dtypes: tuple[Literal["float32", "bfloat16"], ...] = option(("float32", "bfloat16"), "dtypes")
    batch: int = option(1, "batch rows", minimum=1)
    max_len: int = option(256, "cache slots (the step's position is lab.step.fused.tune's, mid-decode)", minimum=2)
    prefetch: bool = option(False, "the PREFETCH kernels, as fused-pdl-prefetch runs them (where the rule takes them)")
    repeats: int = option(100, "launches of one kernel per CUDA graph", minimum=1)
    rotate_l2: float = option(4.0, "copies of what a kernel streams, in multiples of the device's L2", minimum=0.0)
    iters: int = option(10, "graph replays timed per round", minimum=1)
    warmup: int | None = option(None, "untimed replays before each turn (default: the profile's warmup)",
                                profile="warmup")
    rounds: int | None = option(None, "timing rounds, variants in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    step: bool = option(True, "also the whole step with every launch in each step variant (lab.step.fused.stages)")


def copies_for(nbytes: int, l2_bytes: int, rotate_l2: float) -> int:
    """How many copies of an `nbytes` tensor make `rotate_l2` times the L2 (at least one: the tensor itself)."""
    return max(1, math.ceil(rotate_l2 * l2_bytes / max(nbytes, 1)))


def l2_bytes(device: Any) -> int:
    """The device's L2 in bytes, as torch reports it; NOT_RUN where it reports none (the copies that keep a kernel's
    bytes out of L2 are sized from it: a guess would time L2 hits as HBM reads)."""
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    if l2 <= 0:
        raise NotRun(Code.NOT_ON_THIS_DEVICE, f"torch {torch.__version__} reports no L2 size for this device, and the "
                     "copies that keep each kernel's bytes in HBM are sized from it: run it on a GPU whose "
                     "torch.cuda.get_device_properties gives L2_cache_size")
    return l2


def run(ctx: Context[Options]) -> None:
    if ctx.device.type != "cuda":
        raise NotRun(Code.NO_CUDA, "the fused kernels' variants are timed in CUDA graphs: run `python -m lab run "
                                   "--profile gpu --only fused_anatomy` on a host with an NVIDIA GPU")
    from lab.step.fused import anatomy as A, stages as ST, step as S, traffic as T
    from lab.step.fused.tune import timing_state
    from lab.step.capture import capture

    o = ctx.options
    bandwidth = copy_bandwidth(ctx)
    l2 = l2_bytes(ctx.device)
    pdl, why = S.pdl_supported(ctx.device)
    if not pdl:
        ctx.skip("the PDL variants (" + ", ".join(v.name for v in ST.VARIANTS if v.pdl) + ")", Code.NOT_ON_THIS_DEVICE,
                 why)
    variants = [v for v in ST.VARIANTS if pdl or not v.pdl]
    for dtype in o.dtypes:
        params = {P.SIZE: o.size, P.DTYPE: dtype, P.BATCH: o.batch}
        w = random_weights(SHAPES[o.size], ctx.device, dtype)
        state = timing_state(w, o.batch, o.max_len)
        plan = S.prepare(state, w, repeatable=True, prefetch=o.prefetch, path="gemv")
        bound = A.bound(plan)
        for name, launch in bound.items():  # correctness, outside the timing
            ctx.check(f"{name}'s full variant writes what the step's launch writes", same_writes(launch, A.made(
                launch, ST.BY_NAME["full"])), **params)
        calls = T.calls(T.Shape.of(w, o.batch, o.max_len), T.Layout.of_plan(plan), int(state.pos.item()))
        streamed = {c.kernel: c.weights + c.kv_read for c in calls}  # the last layer's (no embedding)
        graphs, kept = {}, []
        with ctx.activity(f"{dtype}: compiling and capturing {len(bound)} kernels x {len(variants)} variants"):
            for name, launch in bound.items():
                big = launch.args[launch.kernel.arg_names.index(A.STREAMED[name])]
                n = min(copies_for(big.numel() * big.element_size(), l2, o.rotate_l2), o.repeats)
                turns = A.rotated(launch, [big] + [big.clone() for _ in range(n - 1)])
                for v in variants:
                    if ST.applies(name, v):
                        series = A.series([A.made(t, v) for t in turns], o.repeats)
                        graphs[f"{name}:{v.name}"] = capture(series, warmup=1)
                        # a graph keeps no reference to what it reads: the series (and the copies it binds) must
                        # outlive its replays (without this the H200 run of 2026-12-03 read freed copies, then
                        # crashed with an illegal address in bf16)
                        kept.append(series)
        rounds = time_methods({k: g.replay for k, g in graphs.items()}, ctx.clock, o.rounds, o.iters, o.warmup)
        times: dict[str, dict[str, list[list[float]]]] = {}
        for key, per_round in rounds.items():
            name, variant = key.split(":")
            us = [[ms * 1e3 / o.repeats for ms in r] for r in per_round]
            times.setdefault(name, {})[variant] = us
            ctx.timing(M.ANATOMY_US, us, kernel=name, variant=variant, **params)
        for name, by_variant in times.items():
            for p in ST.parts(name, by_variant, streamed[name] / bandwidth / 1e3):
                ctx.metric(M.STAGE_US, round(p.us, 4), kernel=name, part=p.part, **params)
                ctx.metric(M.STAGE_US_CI_LOW, None if p.ci is None else round(p.ci.low, 4), kernel=name, part=p.part,
                           **params)
                ctx.metric(M.STAGE_US_CI_HIGH, None if p.ci is None else round(p.ci.high, 4), kernel=name,
                           part=p.part, **params)
        del graphs, kept, plan, bound
        if o.step:
            whole_step(ctx, state, w, pdl, params)
        del state, w
        free_device_memory(ctx.device)


def step_method(prefetch: bool, pdl: bool) -> str:
    """The method whose step `whole_step` takes apart."""
    return "fused-pdl-prefetch" if prefetch and pdl else "fused-pdl" if pdl else "fused"


def whole_step(ctx: Context[Options], state: Any, w: Any, pdl: bool, params: dict[str, Any]) -> None:
    """The step as its method runs it, in each step variant (lab.step.fused.stages.STEP_VARIANTS), timed as one CUDA
    graph of the step each, in rotating rounds."""
    from lab.step.capture import capture
    from lab.step.fused import anatomy as A, stages as ST, step as S

    o = ctx.options
    method = step_method(o.prefetch, pdl)
    plan = S.prepare(state, w, pdl=pdl, repeatable=True, prefetch=o.prefetch and pdl, path="gemv")
    graphs, kept = {}, []
    with ctx.activity(f"{params[P.DTYPE]}: the whole step ({method}, {len(plan.launches)} launches) in each variant"):
        for v in ST.STEP_VARIANTS:
            if v.pdl and not pdl:
                continue
            launches = A.step_variant(plan, v)
            series = A.series(launches, len(launches))
            graphs[v.name] = capture(series, warmup=1)
            kept.append(series)  # as above: the graph holds no reference to what it reads
    rounds = time_methods({k: g.replay for k, g in graphs.items()}, ctx.clock, o.rounds, o.iters, o.warmup)
    for name, per_round in rounds.items():
        ctx.timing(M.ANATOMY_STEP_US, [[ms * 1e3 for ms in r] for r in per_round], variant=name, method=method,
                   **params)
    del graphs, kept, plan


def same_writes(reference: Any, variant: Any) -> bool:
    """Whether `variant` leaves every tensor argument as `reference` leaves it, from the same starting values."""
    tensors = [a for a in reference.args if isinstance(a, torch.Tensor)]
    start = [t.clone() for t in tensors]
    reference()
    want = [t.clone() for t in tensors]
    for t, s in zip(tensors, start):
        t.copy_(s)
    variant()
    return all(torch.equal(t, x) for t, x in zip(tensors, want))
