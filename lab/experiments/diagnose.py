"""diagnose: the five checks on the three example targets, with their verdicts as checks.

The targets (lab/examples/targets.py) are chosen so each verdict is known in advance:
`elementwise_chain` speeds up when compiled (dispatch-bound on a CPU, launch-bound on a GPU),
`gemm_stack` is GEMM-bound (about 1.0×, the correct answer), `breaks_every_call` is graph-broken.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.contract import metrics as M
from lab.measure import profiler_guard
from lab.measure.diagnose import diagnose, load_target
from lab.contract import notes as N
from lab.contract.names import Method
from lab.contract.options import option
from lab.run.context import Context

TARGETS: dict[str, tuple[str, ...]] = {
    "lab.examples.targets:elementwise_chain": ("dispatch-bound", "launch-bound", "fusion"),
    "lab.examples.targets:gemm_stack": ("gemm-bound",),
    "lab.examples.targets:breaks_every_call": ("graph-broken",),
}


@dataclass(frozen=True)
class Options:
    rounds: int = option(3, "timing rounds per target, methods in rotating order", minimum=1)
    iters: int = option(10, "timed calls per round", minimum=1)


def run(ctx: Context[Options]) -> None:
    dev = ctx.device.type
    reason = ctx.toolchain.reason_for("inductor", dev)
    if reason is not None:
        ctx.skip("compiled side of checks 2 and 5", reason.code, reason.message)
    for target, expected in TARGETS.items():
        name = target.split(":")[1]
        profiler_guard.unit_started(name)  # each target is timed, then profiled
        fn, args = load_target(target, dev)
        d = diagnose(fn, args, dev, target=target, inductor_reason=f"{reason.code}: {reason.message}" if reason else None,
                     rounds=ctx.options.rounds, iters=ctx.options.iters,
                     progress=lambda m: ctx.progress(f"{name}: {m}"))  # called before the loop moves on
        ctx.metric(M.VERDICT, d.verdict, target=name)
        for method, per_round in d.samples.items():
            ctx.timing(M.STEP_MS, per_round, target=name, method=method)
        if d.compiled_ms is not None:
            ctx.speedup(M.SPEEDUP, d.samples[Method.EAGER], d.samples[Method.COMPILE_DEFAULT], target=name)
        k = d.check(2).data  # kernels per call, keyed eager / compiled by lab.measure.diagnose
        ctx.metric(M.KERNELS, k["eager"], target=name, method=Method.EAGER)
        if k.get("compiled") is not None:
            ctx.metric(M.KERNELS, k["compiled"], target=name, method=Method.COMPILE_DEFAULT)
        ctx.metrics({M.MATMUL_SHARE: k[M.MATMUL_SHARE.name], M.GRAPH_BREAKS: d.check(3).data[M.GRAPH_BREAKS.name],
                     M.RECOMPILES: d.check(4).data[M.RECOMPILES.name]}, target=name)
        if dev == "cuda":
            ctx.metric(M.HOST_SHARE, d.check(1).data[M.HOST_SHARE.name], target=name)
        ctx.note(N.DIAGNOSE_REPORT.key_for(name), d.render().splitlines())
        ctx.check(f"{name}: verdict {' or '.join(expected)}", d.verdict in expected, fatal=False,
                  detail=f"{d.verdict}: {d.headline}", target=name)
        ctx.progress(f"{name}: {d.verdict}")
