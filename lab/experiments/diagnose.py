"""diagnose: the five checks on the three example targets, with their verdicts as checks.

The targets (lab/examples/targets.py) are chosen so each verdict is known in advance:
`elementwise_chain` speeds up when compiled (dispatch-bound on a CPU, launch-bound on a GPU),
`gemm_stack` is GEMM-bound (about 1.0×, the correct answer), `breaks_every_call` is graph-broken.
"""

from __future__ import annotations

from lab.diagnose import diagnose, load_target

TARGETS: dict[str, tuple[str, ...]] = {
    "lab.examples.targets:elementwise_chain": ("dispatch-bound", "launch-bound", "fusion"),
    "lab.examples.targets:gemm_stack": ("gemm-bound",),
    "lab.examples.targets:breaks_every_call": ("graph-broken",),
}


def run(ctx) -> None:
    dev = ctx.device.type
    reason = ctx.toolchain.reason_for("inductor", dev)
    if reason is not None:
        ctx.skip("compiled side of checks 2 and 5", reason.code, reason.message)
    for target, expected in TARGETS.items():
        name = target.split(":")[1]
        fn, args = load_target(target, dev)
        d = diagnose(fn, args, dev, target=target, inductor_reason=f"{reason.code}: {reason.message}" if reason else None,
                     rounds=int(ctx.opt("rounds", 3)), iters=int(ctx.opt("iters", 10)),
                     progress=lambda m, n=name: ctx.progress(f"{n}: {m}"))
        ctx.metric("verdict", d.verdict, "kind", target=name)
        for method, xs in d.samples.items():
            ctx.timing("step_ms", xs, "ms", target=name, method=method)
        if d.compiled_ms is not None:
            ctx.metric("speedup", d.speedup, "x", target=name)
        k = d.check(2).data
        ctx.metric("kernels", k["eager"], "count", target=name, method="eager")
        if k.get("compiled") is not None:
            ctx.metric("kernels", k["compiled"], "count", target=name, method="compiled")
        ctx.metric("matmul_share", k["matmul_share"], "fraction", target=name)
        ctx.metric("graph_breaks", d.check(3).data["graph_breaks"], "count", target=name)
        ctx.metric("recompiles", d.check(4).data["recompiles"], "count", target=name)
        if dev == "cuda":
            ctx.metric("host_share", d.check(1).data["host_share"], "fraction", target=name)
        ctx.note(f"report.{name}", d.render().splitlines())
        ctx.check(f"{name}: verdict {' or '.join(expected)}", d.verdict in expected, fatal=False,
                  detail=f"{d.verdict}: {d.headline}", target=name)
        ctx.progress(f"{name}: {d.verdict}")
