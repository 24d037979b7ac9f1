"""amdahl: the fusible fraction of a profile, the compile speedup it predicts, and the one measured.

Two workloads: the GPT-2 fixed-shape decode step (batch 1) and one transformer block at a large
batch. From an eager profile, f is the share of kernel time outside matrix products (layer norm,
GELU, softmax, residual adds, copies: what fusion can attack); matrix products are library kernels
compile leaves alone. If fusion makes that part k× faster, Amdahl predicts 1 / ((1 − f) + f / k).

k is measured, not assumed, when this run has a `fusion` record: its compiled speedup for a chain
of `k_n_ops` ops (default 4: a block's fusible runs are short — bias + GELU, residual add, the
layer-norm arithmetic) at the residency matching the workload (cache for the decode step's small
activations, memory for the large block). Without one, k = 3 as in the module text, marked assumed.
The measured speedup comes from compiling the same function; on the GPU the decode step's is read
from `cuda_graph_decode` (compile-default, batch 1) when that record is in the run, to not compile
GPT-2 twice. Either way it is stored with its 95% interval (`speedup_ci_low`, `speedup_ci_high`, same
params): the paired bootstrap over the rotating rounds that every speedup of the lab has
(lab.contract.intervals), computed here from the rounds of eager and compiled, or copied with the
figure from cuda_graph_decode's `speedup_vs_eager`. The 25% bar on the launch-aware prediction is a
bar on a prediction's accuracy, judged at the measured figure; its detail quotes the interval.

Amdahl counts only kernel time, so a step bound by launches (GPT-2 at batch 1 on a GPU: 203 kernels
of a few µs each) is predicted about 1.0× although compiling removes a quarter of its kernels. Beside
it, the launch-aware prediction prices every kernel launch at the cost this run's `ceilings` measured
for one eager op (`launch_us_per_op`, mode eager):

    (N_eager × c + K) / (N_compiled × c + K × ((1 − f) + f / k))

with N the kernels per step of the eager and the compiled step (the compiled count from compiling
here, or cuda_graph_decode's `kernels_per_step`), c the cost per launch and K the eager kernel time
(`kernel_time_per_step_us`); with free launches (c = 0) it is Amdahl's. On the CPU an op's time
already holds its dispatch, so the launch term counts it twice: the prediction is meant for a device
that launches kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.step import decode
from lab.contract import intervals
from lab.contract import metrics as M
from lab.measure.timing import compile_first_call, time_methods
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Param as P
from lab.measure.opprofile import profile_step
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.contract import query
from lab.run.context import Context, stored_interval

DEFAULT_K = 3.0


@dataclass(frozen=True)
class Options:
    decode_layers: int | None = option(None, "layers of the decode step profiled (none: all the model's layers)",
                                       minimum=1)
    block_batch: int = option(4, "batch of the transformer-block workload", minimum=1)
    block_seq: int = option(64, "sequence length of the transformer-block workload", minimum=1)
    k_n_ops: int = option(4, "chain length whose fusion speedup is k", minimum=1)
    iters: int = option(5, "timed calls per round", minimum=1)
    rounds: int | None = option(None, "timing rounds, methods in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    compile_decode: bool = option(True, "compile the decode step to measure its speedup")
    compile_block: bool = option(True, "compile the transformer block to measure its speedup")


def predicted_speedup(f: float, k: float) -> float:
    """Amdahl: a fraction f of the time made k× faster, the rest unchanged."""
    if not 0.0 <= f <= 1.0 or k <= 0:
        raise ValueError(f"need 0 <= f <= 1 and k > 0 (got f={f}, k={k})")
    return 1.0 / ((1.0 - f) + f / k)


def launch_aware_speedup(n_eager: float, n_compiled: float, launch_us: float, kernel_us: float, f: float,
                         k: float) -> float:
    """(eager launches + kernel time) / (compiled launches + the kernel time Amdahl predicts after fusion)."""
    if min(n_eager, n_compiled, launch_us, kernel_us) < 0 or not 0.0 <= f <= 1.0 or k <= 0:
        raise ValueError(f"need non-negative counts and times, 0 <= f <= 1, k > 0 (got {n_eager}, {n_compiled}, "
                         f"{launch_us}, {kernel_us}, f={f}, k={k})")
    compiled = n_compiled * launch_us + kernel_us * ((1.0 - f) + f / k)
    if compiled <= 0:
        raise ValueError("the compiled step would take no time: no prediction")
    return (n_eager * launch_us + kernel_us) / compiled


LAUNCH_AWARE_TOLERANCE = 0.25  # the launch-aware prediction's claim: within 25% of the measured speedup


def launch_aware_check(pred: float, measured: float, ci: intervals.Interval | None) -> tuple[str, bool, str]:
    """The check that the launch-aware prediction is within 25% of the measured speedup, judged by the measured
    speedup's 95% interval: the speedups m with |pred - m| <= 0.25 m are [pred / 1.25, pred / 0.75], and the claim
    fails only when the interval lies wholly outside that band. The speedup is relative to eager, which follows the
    host's CPU speed, so a point estimate outside the band whose interval still reaches it is the host's drift, not
    a wrong prediction. Without an interval (fewer than two rounds) the point estimate is judged, and the detail
    says so."""
    name = "launch-aware prediction within 25% of the measured speedup (decode step, batch 1)"
    band = intervals.Interval(pred / (1 + LAUNCH_AWARE_TOLERANCE), pred / (1 - LAUNCH_AWARE_TOLERANCE))
    detail = f"predicted {pred:.2f}x (within 25%: measured in {band.text()}), measured {measured:.2f}x"
    if ci is None:
        return name, band.contains(measured), detail + " (no interval: fewer than two rounds; judged on the median)"
    return name, ci.overlaps(band), detail + f", 95% interval {ci.text()}"


def launch_cost_us(records: list[Any]) -> float | None:
    """The cost of one eager launch this run's ceilings measured, or None without a ceilings record."""
    m = query.maybe(query.ok(records, Experiment.CEILINGS), M.LAUNCH_US_PER_OP, mode="eager")
    return None if m is None else float(m.value)


def k_from_fusion(records: list[Any], n_ops: int, residency: str) -> tuple[float, str]:
    """(k, where it came from): the fusion record's measured speedup, else the module's 3×."""
    m = query.maybe(query.ok(records, Experiment.FUSION), M.SPEEDUP, n_ops=n_ops, residency=residency)
    if m is not None:
        return max(float(m.value), 1.0), f"measured: fusion speedup at n_ops={n_ops}, {residency} " \
                                         f"({float(m.value):.2f}x, floored at 1)"
    return DEFAULT_K, f"assumed: no fusion record with n_ops={n_ops}, {residency} in this run (module text's 3x)"


def _block(x: torch.Tensor, lw: Any, n_head: int, eps: float, causal: torch.Tensor) -> torch.Tensor:
    q, k, v = decode._qkv(x, lw, n_head, eps)
    x = x + decode._proj(decode._attend(q, k, v, causal), lw)
    return x + decode._mlp(x, lw, eps)


Speedup = tuple[float, intervals.Interval | None]


def _lead_decode_speedup(records: list[Any]) -> Speedup | None:
    """cuda_graph_decode's compile-default speedup at batch 1 (no readback) and its stored interval, or None."""
    rec = query.ok(records, Experiment.CUDA_GRAPH_DECODE)
    for m in rec.metrics if rec else []:
        if (m.name == M.SPEEDUP_VS_EAGER.name and m.params.get(P.METHOD) == Method.COMPILE_DEFAULT
                and m.params.get(P.BATCH) == 1 and not m.params.get(P.READBACK, False)):
            try:
                return float(m.value), stored_interval(rec, M.SPEEDUP_VS_EAGER, **m.params)
            except KeyError:  # a run from before speedups had intervals
                return float(m.value), None
    return None


def _measure(ctx: Context[Options], workload: str, fn: Callable[..., Any], args: tuple[Any, ...], reset: Callable[[], None],
             residency: str, measured_override: Speedup | None = None, compile_it: bool = True) -> None:
    dev = ctx.device
    o = ctx.options
    compiled, samples = None, None
    if measured_override is None and compile_it:  # timed first: the profiles come after (lab.measure.profiler_guard)
        reset()
        compiled = compile_first_call(fn, args, dev, reset=True)
        ctx.metric(M.SETUP_S, round(compiled.setup_s, 3), workload=workload)
        with torch.no_grad():
            reset()
            methods = {Method.EAGER: lambda: fn(*args), Method.COMPILE_DEFAULT: lambda: compiled.fn(*args)}
            samples = time_methods(methods, ctx.clock, o.rounds, o.iters, warmup=1)
    with torch.no_grad():
        reset()
        prof = profile_step(lambda: fn(*args), dev, steps=3, warmup=1)
        cprof = None
        if compiled is not None:
            reset()
            cprof = profile_step(lambda: compiled.fn(*args), dev, steps=3, warmup=1)
    f = prof.fusible_fraction
    k, source = k_from_fusion(ctx.results.experiments, o.k_n_ops, residency)
    pred = predicted_speedup(f, k)
    ctx.metrics({M.FUSIBLE_FRACTION: f, M.MATMUL_SHARE: prof.matmul_share}, workload=workload)
    ctx.metric(M.KERNELS, prof.kernels, workload=workload, method=Method.EAGER)
    ctx.metric(M.K, k, workload=workload)
    ctx.note(N.K_SOURCE.key_for(workload), source)
    ctx.note(N.TOP.key_for(workload), prof.top(8))
    ctx.metric(M.PREDICTED_SPEEDUP, pred, workload=workload)
    ctx.metric(M.KERNEL_TIME_PER_STEP_US, round(prof.kernel_ms * 1e3, 3), workload=workload, method=Method.EAGER)
    n_compiled: float | None = None
    if measured_override is not None:
        measured, ci = measured_override
        ctx.metrics({M.MEASURED_SPEEDUP: measured, M.SPEEDUP_CI_LOW: None if ci is None else ci.low,
                     M.SPEEDUP_CI_HIGH: None if ci is None else ci.high}, workload=workload)
        ctx.note(N.MEASURED_SOURCE.key_for(workload), "cuda_graph_decode: speedup_vs_eager, compile-default, batch 1")
        lead = query.maybe(query.ok(ctx.results.experiments, Experiment.CUDA_GRAPH_DECODE), M.KERNELS_PER_STEP,
                           method=Method.COMPILE_DEFAULT, batch=1, dtype=ctx.profile.dtype)
        n_compiled = None if lead is None else float(lead.value)
        if n_compiled is not None:
            ctx.metric(M.KERNELS, n_compiled, workload=workload, method=Method.COMPILE_DEFAULT)
            ctx.note(N.COMPILED_KERNELS_SOURCE.key_for(workload), "cuda_graph_decode: kernels_per_step, compile-default, "
                                                                        "batch 1")
    elif compiled is None or samples is None or cprof is None:
        key = "compile_decode" if workload == "gpt2_decode_step" else "compile_block"
        ctx.skip(f"measured speedup of {workload}", Code.PROFILE_BUDGET,
                 f"compiling the {workload} is left out of this profile to keep it short: run the cpu or gpu "
                 f"profile, or --set amdahl.{key}=true")
        ctx.skip(f"launch-aware prediction of {workload}", Code.PROFILE_BUDGET,
                 f"it needs the compiled step's kernel count: --set amdahl.{key}=true")
        return
    else:
        n_compiled = cprof.kernels
        ctx.metric(M.KERNELS, cprof.kernels, workload=workload, method=Method.COMPILE_DEFAULT)
        for m, xs in samples.items():
            ctx.timing(M.STEP_MS, xs, workload=workload, method=m)
        measured = ctx.speedup(M.MEASURED_SPEEDUP, samples[Method.EAGER], samples[Method.COMPILE_DEFAULT],
                               workload=workload)
        ci = stored_interval(ctx.record, M.MEASURED_SPEEDUP, workload=workload)
        ctx.note(N.MEASURED_SOURCE.key_for(workload), "compiled here (Inductor default mode), rotating rounds")
        torch._dynamo.reset()
    ctx.metric(M.MEASURED_OVER_PREDICTED, measured / pred, workload=workload)
    ctx.progress(f"{workload}: f={f:.2f} k={k:.2f} predicted {pred:.2f}x measured {measured:.2f}x"
                 f"{' ' + ci.text() if ci else ''}")
    _launch_aware(ctx, workload, prof.kernels, n_compiled, prof.kernel_ms * 1e3, f, k, measured, ci)


def _launch_aware(ctx: Context[Options], workload: str, n_eager: float, n_compiled: float | None, kernel_us: float, f: float, k: float,
                  measured: float, measured_ci: intervals.Interval | None = None) -> None:
    """The launch-aware prediction beside Amdahl's, from this run's ceilings (module docstring)."""
    launch_us = launch_cost_us(ctx.results.experiments)
    if launch_us is None:
        ctx.skip(f"launch-aware prediction of {workload}", Code.NOT_MEASURED,
                 "it needs this run's ceilings record (launch_us_per_op): run ceilings before amdahl (the profiles "
                 "do; add it to --only)")
        return
    if n_compiled is None:
        ctx.skip(f"launch-aware prediction of {workload}", Code.NOT_MEASURED,
                 "the compiled step's kernel count was not measured (cuda_graph_decode has no compile-default "
                 "kernels_per_step at batch 1)")
        return
    ctx.metric(M.LAUNCH_US_PER_OP, launch_us, workload=workload, mode="eager")
    pred = launch_aware_speedup(n_eager, n_compiled, launch_us, kernel_us, f, k)
    ctx.metric(M.PREDICTED_SPEEDUP_LAUNCH, pred, workload=workload)
    ctx.metric(M.MEASURED_OVER_PREDICTED_LAUNCH, measured / pred, workload=workload)
    if ctx.device.type == "cuda" and workload == "gpt2_decode_step":
        name, ok, detail = launch_aware_check(pred, measured, measured_ci)
        ctx.check(name, ok, fatal=False, detail=detail + " (Amdahl alone: see predicted_speedup)")
    ctx.progress(f"{workload}: launch-aware prediction {pred:.2f}x (c={launch_us:.2f} us, kernels {n_eager:.0f} -> "
                 f"{n_compiled:.0f})")


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    _, w = ctx.gpt2()
    o = ctx.options
    layers = o.decode_layers
    wd = w.truncated(layers) if layers else w
    ctx.note(N.DECODE_LAYERS.key, wd.n_layer)
    prompt = torch.randint(0, w.wte.shape[0], (1, ctx.profile.prompt_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        state = decode.prefilled(wd, prompt.to(dev), ctx.profile.max_len)
    saved = state.snapshot()
    lead = _lead_decode_speedup(ctx.results.experiments) if dev.type == "cuda" and not layers else None
    # steps advance the position; restoring before each block keeps them inside the cache
    _measure(ctx, "gpt2_decode_step", decode.decode_step, (state, wd), lambda: state.restore(saved), "cache", lead,
             compile_it=o.compile_decode)

    batch, seq = o.block_batch, o.block_seq
    x = torch.randn(batch, seq, w.n_embd, device=dev, dtype=w.dtype)
    pos = torch.arange(seq, device=dev)
    causal = pos[None, :] > pos[:, None]
    ctx.note(N.BLOCK_SHAPE.key, [batch, seq, w.n_embd])
    _measure(ctx, "transformer_block", _block, (x, w.layers[0], w.n_head, w.eps, causal), lambda: None, "memory",
             compile_it=o.compile_block)
