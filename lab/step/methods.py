"""The ways of running one fixed-shape decode step, as a table: one row per method.

Every method runs a step over a `DecodeState` (by default `decode.decode_step`). A row says how:
compiled or not (backend, mode, Inductor config patch), with static addresses or not, captured in a
manual CUDA graph or not, whether the compiled step must be one graph, whether calls mark cudagraph
tree steps, and optionally a weight preparation, an alternative step function, or a step bound to
the state before capture (`bind`: the hand-fused step prepares its plan, workspace and launches).
`build` reads the row; adding a method is one row in `METHODS` (its name in `lab.contract.names.Method`),
plus at most one function (its step, its binding or its weight preparation).

Inductor's levers are rows of compile+graph with one config switch each (combo kernels,
programmatic dependent launch, coordinate-descent tuning; max-autotune is a mode). Their names are
checked against the installed torch's `torch._inductor.config` before a build (`unavailable`): a
torch without the switch gets the row skipped as `not_in_this_torch`, never silently compiled
without it. No row for a "fused QKV" layout: GPT-2's query, key and value projections are already
one [3E, E] matrix (`Weights.layers[i].attn_w`, the checkpoint's c_attn), read by one GEMV in every
method; weights are in nn.Linear's [out, in] layout throughout (lab.step.model).

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
from typing import Any, Callable, Mapping, cast

import torch

from lab import console
from lab.step import decode
from lab.step.decode import DecodeState
from lab.measure.dynamo_tools import artifact_logs, dynamo_counters
from lab.step.graphs import GraphedStep
from lab.step.model import Weights
from lab.contract.names import Method
from lab.measure.opprofile import enable_cpp_kernel_profile
from lab.measure.timing import Clock, first_call, time_calls

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
    # a step made for one state before any capture (its preparation is part of setup_s): bind(state, w)
    bind: Callable[[DecodeState, Weights], StepFn] | None = None
    needs: tuple[str, ...] = ()  # "triton": Triton imports; "sm90": a CUDA device of compute capability 9.0+

    def __post_init__(self) -> None:
        compile_only = {"mode": self.mode, "static": self.static, "tree_steps": self.tree_steps,
                        "config": self.config, "backend": self.backend != "inductor"}
        used = [k for k, v in compile_only.items() if v]
        if not self.compiled and used:
            raise ValueError(f"step method {self.name}: {', '.join(used)} apply to compiled methods only")
        if self.mode is not None and self.backend != "inductor":
            raise ValueError(f"step method {self.name}: a compile mode needs the inductor backend")
        if self.bind is not None and (self.compiled or self.step is not None):
            raise ValueError(f"step method {self.name}: bind replaces the step of an uncompiled method")
        unknown = sorted(set(self.needs) - {"triton", "sm90"})
        if unknown:
            raise ValueError(f"step method {self.name}: unknown need {unknown[0]!r} (triton, sm90)")


def _fused(pdl: bool = False, prefetch: bool = False) -> Callable[[DecodeState, Weights], StepFn]:
    """The hand-fused step's binding (lab.step.fused.step.bind): Triton is imported only when a row is built."""
    def bind(state: DecodeState, w: Weights) -> StepFn:
        from lab.step.fused.step import bind as fused_bind

        return fused_bind(state, w, pdl=pdl, prefetch=prefetch)

    bind.__name__ = "fused" + ("_pdl" if pdl else "") + ("_prefetch" if prefetch else "")
    return bind


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
    MethodSpec(Method.COMPILE_GRAPH_COMBO, compiled=True, graphed=True, config={"combo_kernels": True}),
    # Inductor generates PDL only on compute capability 9.0+; elsewhere the row would be compile+graph again
    MethodSpec(Method.COMPILE_GRAPH_PDL, compiled=True, graphed=True, config={"triton.enable_pdl": True},
               needs=("sm90",)),
    MethodSpec(Method.COMPILE_GRAPH_COORDESC, compiled=True, graphed=True, config={"coordinate_descent_tuning": True}),
    MethodSpec(Method.MAX_AUTOTUNE, compiled=True, mode="max-autotune-no-cudagraphs"),
    MethodSpec(Method.MAX_AUTOTUNE_GRAPH, compiled=True, graphed=True, mode="max-autotune-no-cudagraphs"),
    MethodSpec(Method.FUSED, graphed=True, bind=_fused(), needs=("triton",)),
    MethodSpec(Method.FUSED_PDL, graphed=True, bind=_fused(pdl=True), needs=("triton", "sm90")),
    MethodSpec(Method.FUSED_PDL_PREFETCH, graphed=True, bind=_fused(pdl=True, prefetch=True), needs=("triton", "sm90")),
)}
COMPILED_METHODS: tuple[str, ...] = tuple(n for n, row in METHODS.items() if row.compiled)


def method_spec(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown step method {name!r} (choose from {', '.join(METHODS)})") from None


def inductor_config_names(names: list[str]) -> list[str]:
    """The names among `names` that the installed torch's torch._inductor.config lacks (dotted: "triton.x")."""
    import torch._inductor.config as inductor_config

    have = inductor_config.get_config_copy()
    return [n for n in names if n not in have]


def unavailable(spec: MethodSpec, device: torch.device) -> tuple[str, str] | None:
    """(reason code, how to make it run) when `spec` cannot be built here; None when it can."""
    from lab.contract.reasons import Code

    if "triton" in spec.needs:
        from lab.step.fused import triton_import_error

        err = triton_import_error()
        if err is not None:
            return Code.NO_TRITON, f"{spec.name} runs Triton kernels and Triton does not import ({err}): install triton"
    if "sm90" in spec.needs:
        cap = torch.cuda.get_device_capability(device) if device.type == "cuda" and torch.cuda.is_available() else None
        if cap is None or cap[0] < 9:
            here = f"{cap[0]}.{cap[1]}" if cap else device.type
            return Code.NOT_ON_THIS_DEVICE, (f"{spec.name} uses programmatic dependent launch, which needs a CUDA device "
                                             f"of compute capability 9.0+ (Hopper or newer; this device: {here})")
    missing = inductor_config_names(list(spec.config)) if spec.config else []
    if missing:
        return Code.NOT_IN_THIS_TORCH, (f"torch {torch.__version__} has no torch._inductor.config.{missing[0]}: "
                                        f"{spec.name} needs a torch whose Inductor has that switch")
    return None


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
_FIRST_COMPILED_BY: dict[int, str] = {}  # id(entry function) -> the method that compiled it first


def compile_entry(spec: MethodSpec, dynamic: bool | None, shape: tuple[Any, ...] = ()) -> StepFn:
    """The function `spec` compiles: calls the row's step, with a code object of its own.

    `shape` separates compilations that differ in what the guards see (the weights' dtype; the batch
    when dynamic=False, one static graph each): each gets its own code object, so a profile with many
    batches and dtypes never reaches Dynamo's recompile limit, which counts per code object."""
    step = spec.step or decode.decode_step
    key = (step, spec.backend, spec.mode, spec.fullgraph, spec.static, repr(sorted(spec.config.items())),
           spec.prepare, dynamic, shape)
    if key not in _ENTRIES:
        def entry(state: DecodeState, w: Weights) -> torch.Tensor:
            return step(state, w)

        name = f"compiled_{getattr(step, '__name__', 'step')}_{len(_ENTRIES)}"
        code = entry.__code__.replace(co_name=name, co_qualname=name)  # a new code object
        _ENTRIES[key] = types.FunctionType(code, entry.__globals__, name, None, entry.__closure__)
    return _ENTRIES[key]


def clone_weights(w: Weights) -> Weights:
    """A private copy of the weights (so marking them static changes nothing for other methods)."""
    from lab.step.model import LayerWeights

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
    # the method whose compilation this one reused (compile+graph after compile-default, same batch and dtype):
    # its setup_s then holds no compile, and what it costs to get ready from nothing includes that one's
    compiled_by: str | None = None
    # the hand-fused step's projection path at this batch (lab.step.fused.rule: gemv, gemv-prefetch, gemm);
    # None for every other method
    path: str | None = None

    def start(self) -> None:
        """Prefill the prompt (untimed) and point the graph's host position mirror at it."""
        decode.prefill(self.state, self.prefill_weights or self.weights, self.prompt)
        if self.graphed is not None:
            self.graphed.sync_position()

    def decode(self, steps: int, clock: Clock, readback: bool) -> list[float]:
        """Per-step milliseconds of `steps` steps after a fresh prefill (lab.measure.timing.time_calls)."""
        self.start()
        last: list[Any] = [None]

        def step() -> None:
            last[0] = self.call()
            if readback:
                self.state.tok.to("cpu")  # a real engine reads each token back (stop check)
        with torch.no_grad():
            samples = time_calls(step, steps, clock)
            # keep the last logits before another method's replay can overwrite a graph's output
            self.logits = last[0].detach().clone() if isinstance(last[0], torch.Tensor) else None
        return samples

    def tokens(self) -> torch.Tensor:
        return self.state.out.detach().cpu().clone()


def _inductor_patch(config: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    import torch._inductor.config as inductor_config

    return cast(contextlib.AbstractContextManager[Any], inductor_config.patch(dict(config)))


def _plain_step(fn: StepFn, state: DecodeState, w: Weights) -> torch.Tensor:
    return fn(state, w)


def _make_ready(m: StepMethod, spec: MethodSpec, warmup: int, dynamic: bool | None) -> None:
    """Prepare the weights, compile (first calls included) and/or capture; set `m.call`."""
    state = m.state
    w = spec.prepare(m.weights) if spec.prepare else m.weights
    if spec.static:
        w = clone_weights(w)
        for t in [*state.buffers().values(), *w.tensors()]:  # static addresses, as a module's parameters have
            torch._dynamo.mark_static_address(t)
    m.weights = w
    fn: StepFn = spec.bind(state, w) if spec.bind else (spec.step or decode.decode_step)
    plan = getattr(fn, "plan", None)  # a bound fused step's plan says which path it took
    m.path = str(plan.path) if plan is not None and hasattr(plan, "path") else None
    call = _tree_step if spec.tree_steps else _plain_step
    if spec.compiled:
        dtype = next((t.dtype for t in state.buffers().values() if t.is_floating_point()), None)  # the cache's
        shape = (str(dtype), state.tok.shape[0] if dynamic is False else None)
        entry = compile_entry(spec, dynamic, shape)
        first = _FIRST_COMPILED_BY.setdefault(id(entry), spec.name)
        m.compiled_by = first if first != spec.name else None
        fn = torch.compile(entry, backend=spec.backend, mode=spec.mode, dynamic=dynamic, fullgraph=spec.fullgraph)
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
    state = decode.prefilled(w, prompt, max_len)
    m = StepMethod(spec.name, state, w, prompt, spec=spec, prefill_weights=w)
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

