"""The ways of running one fixed-shape decode step, as a table: one row per method.

Every method runs a step over a `DecodeState` (by default `decode.decode_step`). A row says how:
compiled or not (backend, mode, Inductor config patch), with static addresses or not, captured in a
manual CUDA graph or not, whether the compiled step must be one graph, whether calls mark cudagraph
tree steps, and optionally a weight preparation and an alternative step function. `build` reads the
row; adding a method is one row in `METHODS` (its name in `lab.names.Method`), plus at most one
function (its step or its weight preparation).

A built `StepMethod` owns its own `DecodeState` (a captured graph is bound to its buffers), knows
how long it took to get ready (weight preparation, compile and/or capture, first calls included:
measured once, separately from steady state) and runs a whole decode: prefill (untimed), then
`steps` steps with a clock mark after each, optionally reading the token back to the host every
step as a real engine does to check for a stop condition.
"""

from __future__ import annotations

import contextlib
import functools
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from lab import console, decode
from lab.decode import DecodeState
from lab.dynamo_tools import artifact_logs, dynamo_counters
from lab.graphs import GraphedStep
from lab.model import Weights
from lab.names import Method
from lab.opprofile import enable_cpp_kernel_profile
from lab.timing import Clock, first_call

StepFn = Callable[[DecodeState, Weights], torch.Tensor]


@dataclass(frozen=True)
class MethodSpec:
    """One way of running the step: a row of `METHODS`."""

    name: Method
    compiled: bool = False  # torch.compile the step (Dynamo, then `backend`)
    mode: str | None = None  # torch.compile's mode (None: its default); Inductor only
    backend: str = "inductor"  # torch.compile's backend
    fullgraph: bool = True  # compiled rows: the step must be one graph, or build raises FullGraphError
    static: bool = False  # give the state and a private copy of the weights static addresses
    tree_steps: bool = False  # mark each call as a new cudagraph-tree step (mode="reduce-overhead")
    graphed: bool = False  # capture the (compiled or eager) step by hand in a CUDA graph and replay it
    config: Mapping[str, Any] = field(default_factory=dict)  # torch._inductor.config patch while getting ready
    prepare: Callable[[Weights], Weights] | None = None  # a weight layout of the method's own
    step: StepFn | None = None  # the method's own step function (default: decode.decode_step)

    def __post_init__(self) -> None:
        compile_only = {"mode": self.mode, "static": self.static, "tree_steps": self.tree_steps,
                        "config": self.config, "backend": self.backend != "inductor"}
        used = [k for k, v in compile_only.items() if v]
        if not self.compiled and used:
            raise ValueError(f"step method {self.name}: {', '.join(used)} apply to compiled methods only")
        if self.mode is not None and self.backend != "inductor":
            raise ValueError(f"step method {self.name}: a compile mode needs the inductor backend")


METHODS: dict[str, MethodSpec] = {row.name: row for row in (
    MethodSpec(Method.EAGER),
    MethodSpec(Method.GRAPH, graphed=True),
    MethodSpec(Method.COMPILE_DEFAULT, compiled=True),
    MethodSpec(Method.REDUCE_OVERHEAD, compiled=True, mode="reduce-overhead", tree_steps=True),
    # Static addresses let cudagraph trees capture a step that mutates its inputs. The FX graph cache
    # is off so that the compile is fresh: a cache hit from the plain reduce-overhead method would
    # bring that method's decision to skip CUDA graphs with it.
    MethodSpec(Method.REDUCE_OVERHEAD_STATIC, compiled=True, mode="reduce-overhead", tree_steps=True, static=True,
               config={"fx_graph_cache": False}),
    MethodSpec(Method.COMPILE_GRAPH, compiled=True, graphed=True),
    MethodSpec(Method.MAX_AUTOTUNE, compiled=True, mode="max-autotune-no-cudagraphs"),
)}
ALL_METHODS: tuple[str, ...] = tuple(METHODS)
COMPILED_METHODS: tuple[str, ...] = tuple(n for n, row in METHODS.items() if row.compiled)


def method_spec(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown step method {name!r} (choose from {', '.join(METHODS)})") from None


class FullGraphError(RuntimeError):
    """A method that needs the step as one graph did not get it: a graph break, a data-dependent
    branch, or the recompile limit reached under fullgraph=True. `reason` is Dynamo's, in one line."""

    def __init__(self, method: str, reason: str, message: str) -> None:
        super().__init__(f"{method}: the step is not one graph: {reason}")
        self.method = method
        self.reason = reason
        self.message = message  # Dynamo's whole message


def _one_graph_errors() -> tuple[type[BaseException], ...]:
    """What torch.compile(fullgraph=True) raises when the step cannot be one graph (names checked,
    not assumed: FailOnRecompileLimitHit is recent)."""
    import torch._dynamo.exc as exc

    names = ("Unsupported", "UserError", "FailOnRecompileLimitHit")
    return tuple(getattr(exc, n) for n in names if isinstance(getattr(exc, n, None), type))


def dynamo_reason(exc: BaseException) -> str:
    """Dynamo's reason in one line: its headline and the line of the step where it stopped."""
    if exc.__cause__ is not None and "recompile" in type(exc).__name__.lower():
        return f"recompile limit reached under fullgraph=True: {dynamo_reason(exc.__cause__)}"
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    headline = lines[0] if lines else type(exc).__name__
    where = ""
    if "from user code:" in text:
        tail = [ln.strip() for ln in text.split("from user code:", 1)[1].splitlines() if ln.strip()]
        files = [i for i, ln in enumerate(tail) if ln.startswith("File ")]
        if files:  # the innermost frame: where the step stopped being one graph
            i = files[-1]
            code = tail[i + 1] if i + 1 < len(tail) and not tail[i + 1].startswith(("File ", "Set ")) else ""
            where = tail[i] + (f": {code}" if code else "")
    return f"{headline} ({where})" if where else headline


# Dynamo keeps compiled code, with the guards that choose it, on the *code object* of the function it
# compiles, not on the torch.compile wrapper; all entries of one code object count against one
# recompile limit, and the guards know nothing of what a row changes outside the arguments: an
# Inductor config patch is not guarded at all, so a row that differed from compile-default only in
# its config would silently run compile-default's cached code. So each distinct compilation (step,
# backend, mode, fullgraph, static addresses, Inductor config, weight preparation, dynamic) gets its
# own entry function with a fresh code object, made once per process and kept here; rows whose
# compilation is the same (compile-default and compile+graph) share one and reuse its compiled code,
# as one function compiled twice would.
_ENTRIES: dict[tuple[Any, ...], StepFn] = {}


def compile_entry(spec: MethodSpec, dynamic: bool | None) -> StepFn:
    """The function `spec` compiles: calls the row's step, with a code object of its own."""
    step = spec.step or decode.decode_step
    key = (step, spec.backend, spec.mode, spec.fullgraph, spec.static, repr(sorted(spec.config.items())),
           spec.prepare, dynamic)
    if key not in _ENTRIES:
        def entry(state: DecodeState, w: Weights) -> torch.Tensor:
            return step(state, w)

        name = f"compiled_{getattr(step, '__name__', 'step')}_{len(_ENTRIES)}"
        code = entry.__code__.replace(co_name=name, co_qualname=name)  # a new code object
        _ENTRIES[key] = types.FunctionType(code, entry.__globals__, name, None, entry.__closure__)
    return _ENTRIES[key]


def mark_static(tensors: list[torch.Tensor]) -> None:
    """Give tensors static addresses for Dynamo/cudagraphs, as a module's parameters and buffers have."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


def clone_weights(w: Weights) -> Weights:
    """A private copy of the weights (so marking them static changes nothing for other methods)."""
    from lab.model import LayerWeights

    layers = tuple(LayerWeights(**{k: v.clone() for k, v in lw.__dict__.items()}) for lw in w.layers)
    return Weights(w.wte.clone(), w.wpe.clone(), layers, w.ln_f_w.clone(), w.ln_f_b.clone(), w.n_head, w.eps)


def _get(d: dict[str, dict[str, int]], group: str, key: str) -> int:
    return int(d.get(group, {}).get(key, 0))


def compiled_frames(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> int:
    """Frames Dynamo compiled between two `dynamo_counters()` snapshots.

    Dynamo counts frames ("frames"/"ok") only on its graph-break-tolerant path; with fullgraph=True
    it does not, but each compiled frame is then exactly one graph ("stats"/"unique_graphs"). The
    larger of the two is exact when only one kind compiled in the window, a lower bound when both
    did, and zero only if nothing compiled.
    """
    return max(_get(after, "frames", "ok") - _get(before, "frames", "ok"),
               _get(after, "stats", "unique_graphs") - _get(before, "stats", "unique_graphs"))


def _counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, int]:
    return {
        "frames": compiled_frames(before, after),
        "graphs": _get(after, "stats", "unique_graphs") - _get(before, "stats", "unique_graphs"),
        "graph_breaks": sum(after.get("graph_break", {}).values()) - sum(before.get("graph_break", {}).values()),
        "cudagraph_skips": _get(after, "inductor", "cudagraph_skips") - _get(before, "inductor", "cudagraph_skips"),
    }


def _tree_step(fn: StepFn, state: DecodeState, w: Weights) -> torch.Tensor:
    """One call of a compiled step; tells cudagraph trees a new step begins (the previous output is dead)."""
    torch.compiler.cudagraph_mark_step_begin()
    return fn(state, w)


@dataclass
class StepMethod:
    """One way of running the step, bound to its own state."""

    name: str
    state: DecodeState
    weights: Weights  # what the step reads (the method's own copy or layout, where it has one)
    prompt: torch.Tensor
    call: Callable[[], Any] = field(repr=False, default=lambda: None)
    graphed: GraphedStep | None = None
    setup_s: float = 0.0  # weight preparation, compile and/or capture, first calls included
    counters: dict[str, int] = field(default_factory=dict)
    skip_reasons: list[str] = field(default_factory=list)
    logits: torch.Tensor | None = None
    spec: MethodSpec | None = None
    prefill_weights: Weights | None = None  # the model's weights, for the (eager) prefill

    def start(self) -> None:
        """Prefill the prompt (untimed) and point the graph's host position mirror at it."""
        decode.prefill(self.state, self.prefill_weights or self.weights, self.prompt)
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


def _inductor_patch(config: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    import torch._inductor.config as inductor_config

    return inductor_config.patch(dict(config))


def _plain_step(fn: StepFn, state: DecodeState, w: Weights) -> torch.Tensor:
    return fn(state, w)


def _make_ready(m: StepMethod, spec: MethodSpec, warmup: int, dynamic: bool | None) -> None:
    """Prepare the weights, compile (first calls included) and/or capture; set `m.call`."""
    state = m.state
    w = spec.prepare(m.weights) if spec.prepare else m.weights
    if spec.static:
        w = clone_weights(w)
        mark_static(list(state.buffers().values()) + w.tensors())
    m.weights = w
    fn: StepFn = spec.step or decode.decode_step
    call = _tree_step if spec.tree_steps else _plain_step
    if spec.compiled:
        fn = torch.compile(compile_entry(spec, dynamic), backend=spec.backend, mode=spec.mode, dynamic=dynamic,
                           fullgraph=spec.fullgraph)
        saved = state.snapshot()
        try:  # the first call compiles; reduce-overhead records its graphs on later calls
            for _ in range(max(1, warmup)):
                call(fn, state, w)
        except _one_graph_errors() as exc:
            if not spec.fullgraph:
                raise
            raise FullGraphError(spec.name, dynamo_reason(exc), str(exc)[:4000]) from exc
        state.restore(saved)
    if spec.graphed:
        m.graphed = GraphedStep(fn, state, w, warmup=warmup)
        m.call = m.graphed.replay
    else:
        m.call = functools.partial(call, fn, state, w)


def build(method: str | MethodSpec, w: Weights, prompt: torch.Tensor, max_len: int, warmup: int = 3,
          dynamic: bool | None = None) -> StepMethod:
    """Make a method (a name in METHODS, or a row) ready, timing that setup once (first calls included).

    `dynamic` is torch.compile's: None (its default) lets automatic dynamic shapes make the batch
    symbolic once a second batch size is seen; False compiles one static graph per batch size.
    Raises FullGraphError when a row that needs one graph gets a graph break.
    """
    spec = method if isinstance(method, MethodSpec) else method_spec(method)
    state = decode.new_state(w, prompt.shape[0], max_len)
    m = StepMethod(spec.name, state, w, prompt, spec=spec, prefill_weights=w)
    decode.prefill(state, w, prompt)
    before = dynamo_counters()
    # On the CPU, Inductor's generated kernels are profiler events only if it emitted them so.
    kernel_events = enable_cpp_kernel_profile() if not prompt.is_cuda else contextlib.nullcontext()
    patch = _inductor_patch(spec.config) if spec.config else contextlib.nullcontext()
    with artifact_logs("cudagraphs") as cg_log, torch.no_grad(), kernel_events, patch, _getting_ready(spec, w, prompt):
        _, m.setup_s = first_call(_make_ready, m, spec, warmup, dynamic, device=prompt.device)
    m.counters = _counter_delta(before, dynamo_counters())
    m.skip_reasons = [msg.strip() for msg in cg_log if "skipping cudagraphs" in msg.lower()]
    return m


def _getting_ready(spec: MethodSpec, w: Weights, prompt: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """The console's "compiling X (first call)" while a compiled or captured method gets ready."""
    verb = ("compiling and capturing" if spec.compiled and spec.graphed else "compiling" if spec.compiled
            else "capturing" if spec.graphed else "")
    if not verb:
        return contextlib.nullcontext()
    dtype = str(w.dtype).removeprefix("torch.")
    return console.activity(f"{verb} {spec.name} (batch {prompt.shape[0]}, {dtype}, first call)")


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
