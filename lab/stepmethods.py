"""The ways of running one fixed-shape decode step: eager, graph replay and the compile modes.

Every method wraps the same `decode_step(state, weights)`. A `StepMethod` owns its own
`DecodeState` (a captured graph is bound to its buffers), knows how long it took to get ready
(compile and/or capture, measured once, separately from steady state) and runs a whole decode:
prefill (untimed), then `steps` steps with a clock mark after each, optionally reading the token
back to the host every step as a real engine does to check for a stop condition.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from lab import decode
from lab.decode import DecodeState
from lab.dynamo_tools import artifact_logs, dynamo_counters
from lab.graphs import GraphedStep
from lab.model import Weights
from lab.opprofile import enable_cpp_kernel_profile
from lab.timing import Clock

COMPILED_METHODS = ("compile-default", "reduce-overhead", "reduce-overhead-static", "compile+graph",
                    "max-autotune-no-cudagraphs")
ALL_METHODS = ("eager", "graph") + COMPILED_METHODS


def mark_static(tensors: list[torch.Tensor]) -> None:
    """Give tensors static addresses for Dynamo/cudagraphs, as a module's parameters and buffers have."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


def clone_weights(w: Weights) -> Weights:
    """A private copy of the weights (so marking them static changes nothing for other methods)."""
    from lab.model import LayerWeights

    layers = tuple(LayerWeights(**{k: v.clone() for k, v in lw.__dict__.items()}) for lw in w.layers)
    return Weights(w.wte.clone(), w.wpe.clone(), layers, w.ln_f_w.clone(), w.ln_f_b.clone(), w.n_head, w.eps)


def _counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, int]:
    def get(d: dict[str, dict[str, int]], group: str, key: str) -> int:
        return int(d.get(group, {}).get(key, 0))

    return {
        "frames": get(after, "frames", "ok") - get(before, "frames", "ok"),
        "graphs": get(after, "stats", "unique_graphs") - get(before, "stats", "unique_graphs"),
        "graph_breaks": sum(after.get("graph_break", {}).values()) - sum(before.get("graph_break", {}).values()),
        "cudagraph_skips": get(after, "inductor", "cudagraph_skips") - get(before, "inductor", "cudagraph_skips"),
    }


# One top-level function per compiled method: Dynamo caches compiled code per code object, so methods
# compiled from one function would share (and overwrite) each other's cache entries.
def _step_default(state: DecodeState, w: Weights) -> torch.Tensor:
    return decode.decode_step(state, w)


def _step_reduce_overhead(state: DecodeState, w: Weights) -> torch.Tensor:
    return decode.decode_step(state, w)


def _step_reduce_overhead_static(state: DecodeState, w: Weights) -> torch.Tensor:
    return decode.decode_step(state, w)


def _step_max_autotune(state: DecodeState, w: Weights) -> torch.Tensor:
    return decode.decode_step(state, w)


STEP_FUNCTIONS = {"compile-default": _step_default, "compile+graph": _step_default,
                  "reduce-overhead": _step_reduce_overhead, "reduce-overhead-static": _step_reduce_overhead_static,
                  "max-autotune-no-cudagraphs": _step_max_autotune}


def _tree_step(compiled: Callable[..., Any], state: DecodeState, w: Weights) -> Any:
    """One call of a compiled step; tells cudagraph trees a new step begins (the previous output is dead)."""
    torch.compiler.cudagraph_mark_step_begin()
    return compiled(state, w)


@dataclass
class StepMethod:
    """One way of running the step, bound to its own state."""

    name: str
    state: DecodeState
    weights: Weights
    prompt: torch.Tensor
    call: Callable[[], Any] = field(repr=False, default=lambda: None)
    graphed: GraphedStep | None = None
    setup_s: float = 0.0  # compile and/or capture, first call included
    counters: dict[str, int] = field(default_factory=dict)
    skip_reasons: list[str] = field(default_factory=list)
    logits: torch.Tensor | None = None

    def start(self) -> None:
        """Prefill the prompt (untimed) and point the graph's host position mirror at it."""
        decode.prefill(self.state, self.weights, self.prompt)
        if self.graphed is not None:
            self.graphed.sync_position()

    def decode(self, steps: int, clock: Clock, readback: bool) -> list[float]:
        """Per-step milliseconds of `steps` steps after a fresh prefill."""
        self.start()
        clock.sync()
        marks = [clock.mark()]
        last = None
        with torch.no_grad():
            for _ in range(steps):
                last = self.call()
                if readback:
                    self.state.tok.to("cpu")  # a real engine reads each token back (stop check)
                marks.append(clock.mark())
            # keep the last logits before another method's replay can overwrite a graph's output
            self.logits = last.detach().clone() if isinstance(last, torch.Tensor) else None
        clock.sync()
        return [clock.elapsed_ms(a, b) for a, b in zip(marks, marks[1:])]

    def tokens(self) -> torch.Tensor:
        return self.state.out.detach().cpu().clone()


def build(name: str, w: Weights, prompt: torch.Tensor, max_len: int, warmup: int = 3,
          dynamic: bool | None = None) -> StepMethod:
    """Make a method ready: compile and/or capture, timing that setup once (first call included).

    `dynamic` is torch.compile's: None (its default) lets automatic dynamic shapes make the batch
    symbolic once a second batch size is seen; False compiles one static graph per batch size.
    """
    state = decode.new_state(w, prompt.shape[0], max_len)
    method = StepMethod(name, state, w, prompt)
    decode.prefill(state, w, prompt)
    before = dynamo_counters()
    sync = torch.cuda.synchronize if prompt.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    # On the CPU, Inductor's generated kernels are profiler events only if it emitted them so.
    kernel_events = enable_cpp_kernel_profile() if not prompt.is_cuda else contextlib.nullcontext()
    with artifact_logs("cudagraphs") as cg_log, torch.no_grad(), kernel_events:
        if name == "eager":
            method.call = lambda: decode.decode_step(state, w)
        elif name == "graph":
            method.graphed = GraphedStep(decode.decode_step, state, w, warmup=warmup)
            method.call = method.graphed.replay
        elif name in ("compile-default", "reduce-overhead", "max-autotune-no-cudagraphs", "compile+graph"):
            mode = {"compile-default": None, "compile+graph": None}.get(name, name)
            compiled = torch.compile(STEP_FUNCTIONS[name], mode=mode, dynamic=dynamic)
            saved = state.snapshot()
            for _ in range(warmup):  # first call compiles; reduce-overhead records its graphs on later calls
                _tree_step(compiled, state, w)
            sync()
            state.restore(saved)
            if name == "compile+graph":
                method.graphed = GraphedStep(compiled, state, w, warmup=warmup)
                method.call = method.graphed.replay
            elif name == "reduce-overhead":
                method.call = lambda: _tree_step(compiled, state, w)
            else:
                method.call = lambda: compiled(state, w)
        elif name == "reduce-overhead-static":
            sw = clone_weights(w)
            method.weights = sw
            mark_static(list(state.buffers().values()) + sw.tensors())
            compiled = torch.compile(STEP_FUNCTIONS[name], mode="reduce-overhead", dynamic=dynamic)
            saved = state.snapshot()
            # A fresh compile (no FX-graph-cache hit from the plain reduce-overhead method): the cached
            # artefact would bring that method's decision to skip CUDA graphs with it.
            with torch._inductor.config.patch(fx_graph_cache=False):
                for _ in range(warmup):
                    _tree_step(compiled, state, sw)
            sync()
            state.restore(saved)
            method.call = lambda: _tree_step(compiled, state, sw)
        else:
            raise ValueError(f"unknown step method {name!r} (choose from {', '.join(ALL_METHODS)})")
        sync()
    method.setup_s = time.perf_counter() - start
    method.counters = _counter_delta(before, dynamo_counters())
    method.skip_reasons = [m.strip() for m in cg_log if "skipping cudagraphs" in m.lower()]
    return method


def count_kernels(fn: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """Device kernels (CUDA) or operator calls (CPU) of one call of `fn`, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
                   and "memset" not in e.name.lower()]
        times = [float(e.device_time if hasattr(e, "device_time") else e.cuda_time) for e in kernels]
        return {"kernels": len(kernels), "device_us": sum(times),
                "top": top_kernels([(e.name, t) for e, t in zip(kernels, times)])}
    # On the CPU the host is the device: outermost operators plus the kernels Inductor generated
    # (lab.opprofile's definition, shared with the overhead experiments).
    from lab.opprofile import summarise

    prof_cpu = summarise(list(events), 1, "cpu")
    return {"kernels": int(prof_cpu.kernels), "device_us": None,
            "top": [{"name": r["name"], "count": int(r["per_step"]), "us": round(r["ms_per_step"] * 1e3, 2)}
                    for r in prof_cpu.top()]}


def top_kernels(named_us: list[tuple[str, float]], n: int = 8) -> list[dict[str, Any]]:
    """The kernels (or ops) that took the most time, grouped by name: where a step's time goes."""
    agg: dict[str, list[float]] = {}
    for name, us in named_us:
        entry = agg.setdefault(name[:100], [0, 0.0])
        entry[0] += 1
        entry[1] += us
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"name": k, "count": int(v[0]), "us": round(v[1], 2)} for k, v in ranked]
