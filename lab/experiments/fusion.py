"""fusion: a chain of N elementwise ops on B bytes, eager vs compiled, inside and far outside the cache.

Eager writes every intermediate and reads it back: 2·N·B bytes for N ops. Fused, the chain reads
its input once and writes its output once: 2·B. The ceiling is therefore N×, reached only when
memory traffic is all that costs. Inside the cache (L2 on a GPU, L1/L2 on the CPU) the
intermediates never reach DRAM/HBM and per-op overheads weigh more; far outside it the bytes rule.
Kernel counts before and after come from the profiler (device kernels on CUDA, op events on CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from lab.contract import metrics as M
from lab.measure.timing import compile_first_call, time_methods
from lab.contract import notes as N
from lab.contract.names import Method
from lab.measure.opprofile import profile_step
from lab.contract.options import option
from lab.run.context import Context


@dataclass(frozen=True)
class Options:
    n_ops: tuple[int, ...] = option((1, 2, 4, 8), "chain lengths (elementwise ops per chain)", minimum=1)
    cache_bytes: int = option(256 * 1024, "bytes of the input that fits in cache", minimum=1)
    memory_bytes: int = option(64 << 20, "bytes of the input far outside the cache", minimum=1)
    rounds: int | None = option(None, "timing rounds, methods in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    iters_cache: int = option(20, "timed calls per round, in cache", minimum=1)
    iters_memory: int = option(3, "timed calls per round, far outside the cache", minimum=1)

# Cheap arithmetic only (no transcendental): each op is memory-bound on its own.
_STEPS: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = (
    lambda x: x * 1.0001, lambda x: x + 0.001, lambda x: x * 0.9999, lambda x: x - 0.0005,
)


def make_chain(n_ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for i in range(n_ops):
            x = _STEPS[i % len(_STEPS)](x)
        return x

    chain.__name__ = f"chain_{n_ops}"
    return chain


def bytes_moved(n_ops: int, nbytes: int, fused: bool) -> int:
    """Read + write of each op (eager), or one read + one write (fused)."""
    return 2 * nbytes if fused else 2 * n_ops * nbytes


def run(ctx: Context[Options]) -> None:
    dev = ctx.device
    o = ctx.options
    n_list = list(o.n_ops)
    sizes = {"cache": o.cache_bytes, "memory": o.memory_bytes}
    rounds = o.rounds
    iters = {"cache": o.iters_cache, "memory": o.iters_memory}
    ctx.note(N.FUSION_BYTES.key, sizes)
    ctx.note(N.FUSION_DTYPE.key, "float32")
    ctx.note(N.KERNELS_MEANING.key, "device kernels per call" if dev.type == "cuda" else
             "outermost op events + generated C++ kernels per call (the CPU has no launches)")
    inputs = {res: torch.rand(b // 4, device=dev) for res, b in sizes.items()}
    profiles: list[tuple[int, Any, Any, torch.Tensor]] = []
    for n in ctx.track(n_list, "chains"):
        chain = make_chain(n)
        torch._dynamo.reset()
        compiled: dict[str, Any] = {}
        # static shapes, one compile per size: a dynamic kernel cannot decide at compile time that a
        # cache-sized tensor is too small to split across threads, and pays for it on every call
        for res, x in inputs.items():
            compiled[res] = compile_first_call(chain, (x,), dev, label=f"{res}-resident input", dynamic=False)
            ctx.metric(M.SETUP_S, round(compiled[res].setup_s, 3), n_ops=n, residency=res)
        c = compiled["cache"]
        with torch.no_grad():
            small = inputs["cache"]
            for res, x in inputs.items():
                cf = compiled[res].fn
                ok = torch.allclose(cf(x), chain(x), rtol=1e-5, atol=1e-6)
                ctx.check(f"compiled equals eager (n_ops={n}, {res})", ok, n_ops=n, residency=res)
                methods: dict[str, Any] = {Method.EAGER: lambda x=x: chain(x),
                                           Method.COMPILE_DEFAULT: lambda x=x, cf=cf: cf(x)}
                samples = time_methods(methods, ctx.clock, rounds, iters[res], warmup=1)
                ms = {}
                for method, xs in samples.items():
                    ms[method] = ctx.timing(M.STEP_MS, xs, method=method, n_ops=n, residency=res).median
                    moved = bytes_moved(n, sizes[res], fused=method == Method.COMPILE_DEFAULT)
                    ctx.metric(M.BYTES_MOVED, moved, method=method, n_ops=n, residency=res)
                    ctx.metric(M.ACHIEVED_GBPS, moved / (ms[method] * 1e-3) / 1e9, method=method, n_ops=n,
                               residency=res)
                ctx.speedup(M.SPEEDUP, samples[Method.EAGER], samples[Method.COMPILE_DEFAULT], n_ops=n,
                            residency=res)
            profiles.append((n, chain, c.fn, small))
        ctx.metric(M.CEILING_X, n, n_ops=n)
    # the profiles after every timing: a profiler session may slow every later launch (lab.measure.profiler_guard)
    with torch.no_grad():
        for n, chain, cfn, small in profiles:
            for method, f in ((Method.EAGER, chain), (Method.COMPILE_DEFAULT, cfn)):
                prof = profile_step(lambda f=f: f(small), dev, steps=3, warmup=1)
                ctx.metric(M.KERNELS, prof.kernels, method=method, n_ops=n)
    torch._dynamo.reset()
    # What the numbers say, as non-fatal facts of this host.
    n_max = max(n_list)
    kern = ctx.record.metric(M.KERNELS.name, method=Method.COMPILE_DEFAULT, n_ops=n_max).value
    ctx.check(f"compiled chain of {n_max} ops runs as at most 2 kernels", kern <= 2, fatal=False,
              detail=f"{kern:.0f} kernel(s) per call")
    for res in sizes:
        sp = ctx.record.metric(M.SPEEDUP.name, n_ops=n_max, residency=res).value
        ctx.note(N.OVER_CEILING.key_for(res), round(sp / n_max, 3))
