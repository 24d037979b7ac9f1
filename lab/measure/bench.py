"""Timing several ways of running the same work, and compiling with the cost kept apart.

Every overhead experiment compares methods (`lab.contract.names.Method`: eager, compile-default, graph,
compile+graph) on one piece of work. The rules are the lab's: warm up, synchronise, time each call with the run's clock (CUDA
events on the GPU), rotate the method order between rounds, keep every sample; the first call of a
compiled function (Dynamo + Inductor) is timed on its own as `setup_s` and never mixed into steps.
"""

from __future__ import annotations

from dataclasses import dataclass
import functools
from typing import Any, Callable

import torch

from lab import console
from lab.measure.opprofile import enable_cpp_kernel_profile
from lab.contract.reasons import Code
from lab.measure.timing import Clock, first_call, rotating_rounds, time_calls


@dataclass
class Compiled:
    fn: Callable[..., Any]
    setup_s: float  # the first call: tracing, lowering, code generation, C++/Triton compilation


def compile_first_call(fn: Callable[..., Any], args: tuple[Any, ...], device: torch.device | str,
                       label: str = "", **compile_kwargs: Any) -> Compiled:
    """torch.compile `fn` and make the first call (timed, synchronised); generated C++ kernels are profilable.
    The console says "compiling <fn's name>, <label> (first call)": `label` tells apart compiles of one function."""
    compiled = torch.compile(fn, **compile_kwargs)
    name = getattr(fn, "__name__", type(fn).__name__) + (f", {label}" if label else "")
    with enable_cpp_kernel_profile(), torch.no_grad(), console.activity(f"compiling {name} (first call)"):
        _, seconds = first_call(compiled, *args, device=device)
    return Compiled(compiled, seconds)


def time_method_rounds(methods: dict[str, Callable[[], Any]], clock: Clock, rounds: int, iters: int,
                       warmup: int = 2) -> dict[str, list[list[float]]]:
    """Per-call ms for each method, one list per round: `rounds` rounds in rotating order, `iters` timed calls
    per round (what `ctx.timing` and `ctx.speedup` take to give a median and a speedup their intervals)."""
    return rotating_rounds({name: functools.partial(time_calls, f, iters, clock, warmup) for name, f in methods.items()},
                           rounds)


def time_methods(methods: dict[str, Callable[[], Any]], clock: Clock, rounds: int, iters: int,
                 warmup: int = 2) -> dict[str, list[float]]:
    """Per-call ms for each method: `rounds` rounds in rotating order, `iters` timed calls per round, flattened."""
    per_round = time_method_rounds(methods, clock, rounds, iters, warmup)
    return {name: [x for r in rounds_ for x in r] for name, rounds_ in per_round.items()}


def inductor_skip(ctx: Any, item: str) -> bool:
    """Record `item` as skipped (with the toolchain's reason) when Inductor cannot compile here; True if skipped."""
    reason = ctx.toolchain.reason_for("inductor", ctx.device.type)
    if reason is None:
        return False
    ctx.skip(item, reason.code, reason.message)
    return True


def cuda_skip(ctx: Any, item: str) -> bool:
    """Record `item` as skipped when the run is not on a CUDA device (graph replay needs one); True if skipped."""
    if ctx.device.type == "cuda":
        return False
    ctx.skip(item, Code.NO_CUDA, "CUDA graph capture and replay need a CUDA device: run the gpu profile on a host "
                              "with an NVIDIA GPU and a CUDA build of torch")
    return True
