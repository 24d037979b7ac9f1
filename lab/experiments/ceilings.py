"""ceilings: this host's launch, bandwidth and compute ceilings, and which one binds each method's step.

Measured in this run on the profile's device: the cost of one tiny eager op and of one node of a
replayed CUDA graph, the device copy bandwidth, fp32 and bf16 matmul peaks (the best of several
repeats is the ceiling; all samples are kept). Then, for each method and batch of this run's
cuda_graph_decode (or, where that did not run, the eager step measured here): kernels per step,
bytes and FLOPs per step, the three bounds, which binds, measured / bound; MBU only for a step timed
here (lab.step.ceilings.mbu: cuda_graph_decode stores its methods' own, one value per step).

The bytes a step must read: lab.step.ceilings.decode_bytes (the slots it attends, 80.5 for a 16-token prompt and 128
steps; the fixed-shape step reads all max_len of them, masked: work it chose, not work the step needs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.step import ceilings, methods as stepmethods
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.names import Experiment, Method, Param as P, Status
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.contract import query
from lab.experiments.common.sweep import prompt_for
from lab.measure.stepprofile import count_kernels
from lab.measure.timing import rotating_rounds
from lab.run.context import Context

CUDAGRAPH_TREE_METHODS = {Method.REDUCE_OVERHEAD, Method.REDUCE_OVERHEAD_STATIC}  # graphs unless Inductor skipped them


@dataclass(frozen=True)
class Options:
    copy_bytes: int | None = option(None, "bytes copied to measure bandwidth (default: 2 GiB on CUDA, 128 MiB on "
                                           "the CPU)", by_device={"cuda": 2 << 30, "cpu": 128 << 20}, minimum=1)
    matmul_n_fp32: int | None = option(None, "n of the n x n fp32 matmul peak (default: 8192 on CUDA, 1024 on the CPU)",
                                       by_device={"cuda": 8192, "cpu": 1024}, minimum=1)
    matmul_n_bf16: int | None = option(None, "n of the n x n bf16 matmul peak, 0 to skip it (default: 8192 on CUDA, "
                                             "0 on the CPU)", by_device={"cuda": 8192, "cpu": 0})
    steps: int | None = option(None, "decode steps per round where ceilings times the step itself (default: the "
                                     "profile's decode_steps)", profile="decode_steps", minimum=1)


def _uses_graphs(rec, method: str, batch: int, dtype: str) -> bool:
    row = stepmethods.METHODS.get(method)
    if row is not None and row.graphed:
        return True
    if method in CUDAGRAPH_TREE_METHODS and rec is not None:
        try:
            return rec.metric(M.CUDAGRAPH_SKIPS.name, method=method, batch=batch, dtype=dtype).value == 0
        except KeyError:
            return False
    return False


def _own_steps(ctx: Context[Options]) -> int:
    prof = ctx.profile
    return min(ctx.options.steps or prof.decode_steps, prof.max_len - prof.prompt_len - 2)


def _own_measurements(ctx: Context[Options], w) -> list[dict]:
    """Eager (and graph replay on CUDA) step times and kernel counts, when cuda_graph_decode did not run."""
    prof = ctx.profile
    rows = []
    steps = _own_steps(ctx)
    methods = (Method.EAGER, Method.GRAPH) if ctx.device.type == "cuda" else (Method.EAGER,)
    timed = []
    for batch in ctx.track(prof.batches, "batches (eager and graph, timed)"):
        prompt = prompt_for(prof.model.vocab_size, batch, prof.prompt_len, ctx.device, 3000 + batch)
        built = {m: stepmethods.build(m, w, prompt, prof.max_len, warmup=prof.warmup) for m in methods}
        samples = rotating_rounds({m: (lambda b=b: b.decode(steps, ctx.clock, False)) for m, b in built.items()},
                                  max(2, prof.rounds - 2))
        for m, b in built.items():
            sp = ctx.timing(M.STEP_MS, samples[m], method=m, batch=batch, dtype="float32", readback=False)
            timed.append((m, batch, b, sp.median))
    # the kernel counts after every timing: a profiler session may slow every later launch (profiler_guard)
    for m, batch, b, ms in timed:
        b.start()
        kernels = count_kernels(b.call, ctx.device)["kernels"]
        rows.append({P.METHOD: m, P.BATCH: batch, P.DTYPE: "float32", "ms": ms, "kernels": kernels})
    return rows


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    sizes = {k: getattr(ctx.options, k) for k in ("copy_bytes", "matmul_n_fp32", "matmul_n_bf16")}
    ctx.note(N.SIZES.key, sizes)
    # --- the ceilings
    eager_us = ceilings.launch_us_eager(dev)
    ctx.timing(M.LAUNCH_US_PER_OP_SAMPLES, eager_us, mode="eager")
    launch_eager = min(eager_us)
    ctx.metric(M.LAUNCH_US_PER_OP, round(launch_eager, 4), mode="eager")
    launch_node = None
    if dev.type == "cuda":
        node_us = ceilings.launch_us_graph_node(dev)
        ctx.timing(M.LAUNCH_US_PER_OP_SAMPLES, node_us, mode="graph_node")
        launch_node = min(node_us)
        ctx.metric(M.LAUNCH_US_PER_OP, round(launch_node, 4), mode="graph_node")
    else:
        ctx.skip("launch_us_per_op graph_node", Code.NO_CUDA, "graph-node launch cost needs a CUDA device")
    bw = ceilings.copy_bandwidth_gbps(dev, sizes["copy_bytes"])
    ctx.timing(M.BANDWIDTH_GBPS_SAMPLES, bw, kind="copy", bytes=sizes["copy_bytes"])
    bandwidth = max(bw)
    ctx.metric(M.BANDWIDTH_GBPS, round(bandwidth, 2), kind="copy")
    peaks: dict[str, float] = {}
    for dtype_name, dtype, n in (("float32", torch.float32, sizes["matmul_n_fp32"]),
                                 ("bfloat16", torch.bfloat16, sizes["matmul_n_bf16"])):
        if n <= 0:
            ctx.skip(f"matmul_TFLOPs {dtype_name}", Code.NOT_ON_THIS_DEVICE,
                     f"the {dtype_name} matmul peak is measured on CUDA devices only (set ceilings.matmul_n_bf16 to force)")
            continue
        tf = ceilings.matmul_tflops(dev, dtype, n)
        ctx.timing(M.MATMUL_TFLOPS_SAMPLES, tf, dtype=dtype_name, n=n)
        peaks[dtype_name] = max(tf)
        ctx.metric(M.MATMUL_TFLOPS, round(peaks[dtype_name], 3), dtype=dtype_name, n=n)
    if dev.type == "cuda":
        ctx.note(N.TF32_MATMUL.key, torch.backends.cuda.matmul.allow_tf32)
    # --- the bounds of each measured step
    rec, failed = query.measured(ctx.results.experiments, Experiment.CUDA_GRAPH_DECODE)
    rows: list[dict] = []
    if rec is not None:
        source = Experiment.CUDA_GRAPH_DECODE if rec.status == Status.OK else \
            f"cuda_graph_decode ({rec.status}: the cases whose fatal checks failed are left out)"
        for m in rec.metrics:
            if m.name == M.STEP_MS.name and m.params.get(P.READBACK) is False:
                p = m.params
                if (p[P.METHOD], p[P.BATCH], p[P.DTYPE]) in failed:
                    ctx.skip(f"bounds {p[P.METHOD]} batch {p[P.BATCH]} {p[P.DTYPE]}", Code.CHECK_FAILED,
                             "its correctness check failed in cuda_graph_decode: its step time bounds nothing")
                    continue
                try:
                    k = rec.metric(M.KERNELS_PER_STEP.name, method=p[P.METHOD], batch=p[P.BATCH], dtype=p[P.DTYPE]).value
                except KeyError:
                    continue
                rows.append({P.METHOD: p[P.METHOD], P.BATCH: p[P.BATCH], P.DTYPE: p[P.DTYPE], "ms": m.value, "kernels": k})
    else:
        source = "measured here"
        rows = _own_measurements(ctx, ctx.gpt2("float32")[1])
    ctx.note(N.STEP_SOURCE.key, source)
    prof = ctx.profile
    if rec is not None:
        config = rec.notes.get(N.DECODE_CONFIG.key)
        steps = int(config.get(P.STEPS, prof.decode_steps)) if isinstance(config, dict) else prof.decode_steps
    else:
        steps = _own_steps(ctx)
    slots = ceilings.attended_slots(prof.prompt_len, steps)
    ctx.note(N.ATTENDED_SLOTS.key, {"slots": slots, "prompt_len": prof.prompt_len, P.STEPS: steps,
                                    "why": "bytes_per_step: lab.step.ceilings.decode_bytes, the slots a step attends"})
    weights = {"float32": ctx.gpt2("float32")[1]}
    for row in rows:
        dtype = row[P.DTYPE]
        if dtype not in weights:
            weights[dtype] = ctx.gpt2(dtype)[1]
        if dtype not in peaks:
            ctx.skip(f"bounds {row[P.METHOD]} batch {row[P.BATCH]} {dtype}", Code.NO_PEAK,
                     f"no {dtype} matmul peak was measured on this device")
            continue
        w = weights[dtype]
        graphed = _uses_graphs(rec, row[P.METHOD], row[P.BATCH], dtype)
        basis = "graph_node" if (graphed and launch_node is not None) else "eager"
        per_kernel = launch_node if basis == "graph_node" else launch_eager
        nbytes = ceilings.decode_bytes(w, row[P.BATCH], prof.prompt_len, steps)
        flops = ceilings.step_flops(w, row[P.BATCH], slots)
        b = ceilings.bounds(int(row["kernels"]), per_kernel, nbytes, bandwidth, flops, peaks[dtype])
        params = {P.METHOD: row[P.METHOD], P.BATCH: row[P.BATCH], P.DTYPE: dtype}
        ctx.metrics({M.KERNELS_PER_STEP: row["kernels"], M.LAUNCH_COST_BASIS: basis, M.BYTES_PER_STEP: nbytes,
                     M.FLOPS_PER_STEP: flops, M.BOUND_LAUNCH_MS: round(b.launch_ms, 5),
                     M.BOUND_BANDWIDTH_MS: round(b.bandwidth_ms, 5), M.BOUND_COMPUTE_MS: round(b.compute_ms, 5),
                     M.BOUND_MS: round(b.bound_ms, 5), M.BINDING: b.binding, M.MEASURED_MS: row["ms"],
                     M.MEASURED_OVER_BOUND: round(row["ms"] / b.bound_ms, 3)}, **params)
        bounded = row["ms"] >= b.bound_ms  # else not a bound here: the pages say so (report.sections.steps.bound_of)
        ctx.check(f"{row[P.METHOD]}'s step is not below its bound (batch {row[P.BATCH]}, {dtype})", bounded, f"{row['ms']:.4g}"
                  f" ms, {b.binding} bound {b.bound_ms:.4g} ms" + ("" if bounded else ": not a bound here (noisy)"), False, **params)
        ctx.metric(M.ACHIEVED_GBPS, round(nbytes / (row["ms"] / 1e3) / 1e9, 2), **params)
        if rec is None:  # a step it timed itself; cuda_graph_decode's steps have their one MBU there (issue 28)
            ctx.metric(M.MBU, ceilings.mbu(nbytes, row["ms"], bandwidth), **params)
