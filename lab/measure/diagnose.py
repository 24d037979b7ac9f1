"""The five checks for "I compiled my model and got nothing — why?", with a verdict and its evidence.

In order (the module text's order, because each one rules a cause in or out for the next):
1. host vs device: self CPU time against self CUDA time per step, and how busy the GPU is during a
   step. A GPU idle most of the step is waiting on the host: launch-bound. On the CPU there is no
   separate device; the check says so and reports ops per step and the mean time per op instead.
2. kernels eager vs compiled (and the time share of matrix products): nothing to fuse when the
   time is in a few large GEMMs.
3. graph breaks with reasons (torch._dynamo.explain): a function shattered into many graphs keeps
   Python between them on every call.
4. recompiles with reasons: the same inputs called again must not compile again.
5. steady state: warm-up, synchronisation, rotating rounds; the first (compiling) call is reported
   apart; a drift between the first and last rounds means the measurement is not steady yet.

`diagnose()` runs them on a callable and example inputs and returns a `Diagnosis`; the verdict
logic (`verdict()`) is a pure function of the check results, so tests can feed it numbers.
"""

from __future__ import annotations

import importlib
import inspect
import io
from contextlib import redirect_stdout
from statistics import median
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from lab.contract import metrics as M
from lab.contract.intervals import Interval, ratio_interval
from lab.contract.names import Method
from lab.measure.opprofile import StepProfile, profile_step
from lab.measure.timing import HostClock, clock_for, compile_first_call, flat, spread, sync, time_calls, time_methods

HOST_BOUND_BUSY = 0.5  # GPU busy under half the step: the host is the bottleneck
GEMM_BOUND_SHARE = 0.6  # matrix products above 60% of kernel time: little left to fuse
CPU_DISPATCH_US = 10.0  # CPU ops averaging under 10 µs are dominated by dispatch, not arithmetic
HELPS_X = 1.15  # a compiled speedup above this counts as "compile helps"
DRIFT = 0.25  # first vs last round medians differing by more than this: not steady


@dataclass
class Check:
    """One of the five checks: what it found, in one line, and the numbers behind it."""

    number: int
    name: str
    status: str  # "ok" (nothing wrong here), "finding" (a cause), "needs_cuda", "not_run"
    evidence: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diagnosis:
    target: str
    device: str
    checks: list[Check]
    verdict: str  # graph-broken | recompiling | gemm-bound | launch-bound | dispatch-bound | fusion | no-overhead
    headline: str
    eager_ms: float | None = None
    compiled_ms: float | None = None
    setup_s: float | None = None
    samples: dict[str, list[list[float]]] = field(default_factory=dict)  # raw per-call ms per method, per round

    @property
    def speedup(self) -> float | None:
        return self.eager_ms / self.compiled_ms if self.eager_ms and self.compiled_ms else None

    def check(self, number: int) -> Check:
        return self.checks[number - 1]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d[M.SPEEDUP.name] = self.speedup
        return d

    def render(self) -> str:
        marks = {"ok": "ok", "finding": "FOUND", "needs_cuda": "needs CUDA", "not_run": "not run"}
        return "\n".join([f"diagnose {self.target} on {self.device}",
                          *(f"  {c.number}. {c.name:<28} [{marks.get(c.status, c.status)}] {c.evidence}"
                            for c in self.checks),
                          f"verdict: {self.verdict}: {self.headline}"])


# ---------------------------------------------------------------------------- loading a target

def load_target(spec: str, device: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Resolve TARGET `module:function`; the function returns (callable, example_inputs).

    If the function takes a `device` parameter it gets the device name; it may take no other required
    parameter. Errors are one-line ValueErrors naming the target.
    """
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"TARGET {spec!r}: expected module:function (e.g. lab.examples.targets:elementwise_chain)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"TARGET {spec!r}: cannot import {module_name!r} ({exc})") from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise ValueError(f"TARGET {spec!r}: {module_name} has no function {func_name!r}")
    try:
        params: Mapping[str, inspect.Parameter] = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}  # a builtin without a signature: called with nothing
    required = [n for n, p in params.items() if n != "device" and p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise ValueError(f"TARGET {spec!r}: {func_name}() takes {', '.join(required)}, but diagnose calls it with no "
                         f"arguments (or only device=): give them defaults, or write a function that builds the "
                         f"workload and returns (callable, example_inputs)")
    made = factory(device=device) if "device" in params else factory()
    return made_pair(spec, func_name, made)


def made_pair(spec: str, func_name: str, made: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What the target's function returned, checked to be (callable, example_inputs); a ValueError saying what is
    wrong with it otherwise."""
    want = f"TARGET {spec!r}: {func_name}() must return (callable, example_inputs)"
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        what = f"a {type(made).__name__} of {len(made)} items" if isinstance(made, (tuple, list)) else \
            f"a {type(made).__name__}"
        raise ValueError(f"{want}, got {what}")
    fn, inputs = made
    if not callable(fn):
        raise ValueError(f"{want}: its first item is a {type(fn).__name__}, not callable")
    if not isinstance(inputs, (tuple, list)):
        raise ValueError(f"{want} with example_inputs a tuple of positional arguments, got a {type(inputs).__name__} "
                         f"(for one argument write (x,))")
    try:
        inspect.signature(fn).bind(*inputs)
    except TypeError as exc:
        raise ValueError(f"{want}: the callable cannot take the {len(inputs)} example input(s) ({exc})") from None
    except ValueError:
        pass  # no signature to check (a builtin): the first call tells
    return fn, tuple(inputs)


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return bool(hasattr(value, "logits") and isinstance(value.logits, torch.Tensor))  # a transformers output


def check_result(target: str, value: Any) -> None:
    """The callable's result must hold a tensor: without one there is no torch work to diagnose (ValueError)."""
    if not _has_tensor(value):
        what = "None" if value is None else type(value).__name__
        raise ValueError(f"TARGET {target!r}: the callable returned {what}, not a tensor (nor "
                         f"tensors in a tuple, list or dict): diagnose measures torch work, so return the tensor(s) "
                         f"the callable computes")


# ---------------------------------------------------------------------------- the checks

def _breaks(fn: Callable[..., Any], args: tuple[Any, ...]) -> Check:
    from lab.measure.dynamo_tools import explain

    with redirect_stdout(io.StringIO()):
        e = explain(fn, *args)
    data = {M.GRAPHS.name: e.graphs, M.GRAPH_BREAKS.name: e.breaks, M.OPS.name: e.ops, "reasons": e.reasons}
    if e.graphs < 1 or e.breaks < 0:  # nothing captured: no count to judge by
        return Check(3, "graph breaks", "not_run", f"Dynamo captured no graph ({e.ops} ops): nothing here to break",
                     data)
    if e.breaks:
        first = e.reasons[0] if e.reasons else "no reason given"
        return Check(3, "graph breaks", "finding",
                     f"{e.breaks} break(s): each call runs {e.graphs} graphs with Python between; first reason: "
                     f"{first[:160]}", data)
    return Check(3, "graph breaks", "ok", f"one graph, no breaks ({e.ops} ops captured)", data)


def _recompiles(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> Check:
    """Compile with the counting backend (no compiler needed), call `calls` times with the same inputs."""
    from torch._dynamo.utils import counters

    from lab.measure.dynamo_tools import CountingBackend, quiet_dynamo, recompile_reasons

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, backend=CountingBackend())  # by hand: counting frames, not timing a compile
    with recompile_reasons() as reasons, quiet_dynamo(), redirect_stdout(io.StringIO()), torch.no_grad():
        compiled(*args)
        first = int(counters["frames"].get("ok", 0))
        for _ in range(calls - 1):
            compiled(*args)
        total = int(counters["frames"].get("ok", 0))
    torch._dynamo.reset()
    again = total - first
    short = [r.strip().splitlines()[-1].strip()[:200] for r in reasons]
    data = {"calls": calls, "frames_first_call": first, M.RECOMPILES.name: again, "reasons": short[:8]}
    if again:
        why = short[0] if short else "no reason logged"
        return Check(4, "recompiles", "finding",
                     f"{again} recompile(s) over {calls - 1} repeat calls with the same inputs; first reason: {why}", data)
    return Check(4, "recompiles", "ok", f"none over {calls - 1} repeat calls ({first} frame(s) compiled on the first)",
                 data)


def _host_device(eager: StepProfile, eager_ms: float, device: str) -> Check:
    if device == "cuda":
        dev_ms = eager.self_device_ms or 0.0
        busy = min(dev_ms / eager_ms, 1.0) if eager_ms > 0 else 0.0
        data: dict[str, float | None] = {"self_cpu_ms": eager.self_cpu_ms, "self_device_ms": dev_ms, M.STEP_MS.name: eager_ms,
                "device_busy": busy, M.HOST_SHARE.name: 1 - busy}
        text = (f"self CPU {eager.self_cpu_ms:.3f} ms vs self CUDA {dev_ms:.3f} ms per step; the GPU is busy "
                f"{busy:.0%} of the {eager_ms:.3f} ms step")
        return Check(1, "host vs device time", "finding" if busy < HOST_BOUND_BUSY else "ok",
                     text + (": launch-bound" if busy < HOST_BOUND_BUSY else ": the device is the bottleneck"), data)
    per_op = eager_ms * 1e3 / eager.kernels if eager.kernels else 0.0
    data = {"self_cpu_ms": eager.self_cpu_ms, "self_device_ms": None, M.STEP_MS.name: eager_ms,
            M.OPS.name: eager.kernels, M.US_PER_OP.name: per_op}
    return Check(1, "host vs device time", "needs_cuda",
                 f"self CUDA time needs a CUDA device; on the CPU: {eager.kernels:.0f} ops per step at a mean "
                 f"{per_op:.1f} µs each ({eager_ms:.3f} ms step, self CPU {eager.self_cpu_ms:.3f} ms)", data)


def _kernels(eager: StepProfile, compiled: StepProfile | None, why_not: str | None, device: str) -> Check:
    unit = "kernels" if device == "cuda" else "ops"
    data: dict[str, Any] = {"eager": eager.kernels, "compiled": compiled.kernels if compiled else None,
                            M.MATMUL_SHARE.name: eager.matmul_share, "top_eager": eager.top(5)}
    gemm = f"{eager.matmul_share:.0%} of eager {unit} time in matrix products"
    if compiled is None:
        return Check(2, f"{unit} eager vs compiled", "not_run", f"not compiled ({why_not}); {gemm}", data)
    data["top_compiled"] = compiled.top(5)
    fewer = compiled.kernels < 0.7 * eager.kernels
    return Check(2, f"{unit} eager vs compiled", "finding" if fewer else "ok",
                 f"{eager.kernels:.0f} → {compiled.kernels:.0f} {unit} per step; {gemm}", data)


def _steady(samples: dict[str, list[list[float]]], rounds: int, setup_s: float | None, naive_ms: float | None) -> Check:
    data: dict[str, Any] = {M.SETUP_S.name: setup_s}
    parts = []
    steady = True
    for name, per_round in samples.items():
        first, last = median(per_round[0]), median(per_round[-1])
        drift = abs(last - first) / first if first else 0.0
        sp = spread(flat(per_round))
        data[name] = {"median_ms": sp.median, "rel_iqr": sp.rel_iqr, "noisy": sp.noisy, "drift": drift}
        steady &= drift <= DRIFT
        parts.append(f"{name} {sp.median:.3f} ms (IQR {sp.rel_iqr:.0%}, drift {drift:.0%})")
    text = ", ".join(parts) + f" after warm-up, synchronised, {rounds} rotating rounds"
    if setup_s is not None:
        text += f"; the compiling first call ({setup_s:.2f} s) is excluded"
    if naive_ms is not None:
        data["unsynchronised_ms"] = naive_ms
        text += f"; timed without synchronising it would read {naive_ms:.3f} ms"
    data["steady"] = steady
    return Check(5, "steady state", "ok" if steady else "finding", text if steady else "NOT steady: " + text, data)


# ---------------------------------------------------------------------------- the verdict

def verdict(checks: Sequence[Check], speedup: float | None, device: str,
            interval: Interval | None = None) -> tuple[str, str]:
    """(kind, headline) from the five checks: the first cause found, in the order a user should fix them.
    `interval`: the speedup's 95% interval (rounds paired); a speedup counts as beyond what fusion could give a
    GEMM-bound step only where its whole interval is."""
    host, kern, brk, rec, steady = checks
    sp = (f"compile {speedup:.2f}×" + ("" if interval is None else f" {interval.text()}") if speedup
          else "compile not measured")
    k = kern.data
    fewer = k.get("compiled") is not None and k["compiled"] < k["eager"]
    kernels_txt = (f"compile {'reduced' if fewer else 'kept'} {'kernels' if device == 'cuda' else 'ops'} "
                   f"{k['eager']:.0f} → {k['compiled']:.0f}" if k.get("compiled") is not None else "")
    if brk.status == "finding" and brk.data.get("graph_breaks", 0) > 0:
        reasons = brk.data.get("reasons") or ["?"]
        return "graph-broken", (f"{brk.data[M.GRAPH_BREAKS.name]} graph break(s) on every call "
                                f"({reasons[0][:100]}); {sp}: remove the breaks first (keep decisions in tensors, no .item()/print)")
    if rec.status == "finding" and rec.data.get(M.RECOMPILES.name, 0) > 0:
        return "recompiling", (f"{rec.data[M.RECOMPILES.name]} recompile(s) on repeat calls; {sp}: make shapes and "
                               f"Python values stable (fixed-shape buffers, dynamic=True, or mark_dynamic)")
    tail = "" if steady.status == "ok" else " (measurement not steady: rerun with more warm-up)"
    share = k.get(M.MATMUL_SHARE.name, 0.0)
    # Fusion can at best remove the non-GEMM time: a speedup beyond 1/share (+10%), its interval included, is
    # something else, unless the timing itself was not steady (a 2-core host once read 1.22x for six unfused GEMMs)
    # or compile fused nothing (the same count of ops: a 2-core host read 1.21x [1.18, 1.24], steady, for six GEMMs
    # it left as six; that is other GEMM kernels or the host's speed between rounds, never fusion).
    low = speedup if interval is None or speedup is None else interval.low
    beyond = share > 0 and low is not None and low > 1.1 / share
    if share >= GEMM_BOUND_SHARE and (not beyond or steady.status != "ok" or not fewer):
        unexplained = (f"; not fusion: {kernels_txt}, so the speedup is other GEMM kernels or the host's speed "
                       f"between rounds" if beyond and not fewer and steady.status == "ok" else "")
        return "gemm-bound", (f"{share:.0%} of time in matrix products; {sp} — the correct answer: the GEMMs are "
                              f"already library kernels and there is little to fuse or launch{unexplained}{tail}")
    if device == "cuda" and host.status == "finding":
        return "launch-bound", (f"{host.data[M.HOST_SHARE.name]:.0%} of step time is host; "
                                f"{kernels_txt or sp}{'; ' + sp if kernels_txt else ''}; expect graph replay to help"
                                f"{tail}")
    if device != "cuda" and host.data.get(M.OPS.name, 0) > 0 and host.data.get(M.US_PER_OP.name, 1e9) < CPU_DISPATCH_US:
        return "dispatch-bound", (f"{host.data[M.OPS.name]:.0f} ops per step at "
                                  f"{host.data[M.US_PER_OP.name]:.1f} µs each; "
                                  f"{kernels_txt + '; ' if kernels_txt else ''}{sp}: fewer, larger ops help "
                                  f"(compile); on a GPU, graph replay would too{tail}")
    if speedup is not None and speedup >= HELPS_X and fewer:
        return "fusion", f"{kernels_txt + '; ' if kernels_txt else ''}{sp}: fusion removed memory traffic{tail}"
    return "no-overhead", (f"no launch, fusion or compile problem found; {sp}; "
                           f"{kernels_txt or 'kernel counts not compared'}{tail}")


# ---------------------------------------------------------------------------- running them

def diagnose(fn: Callable[..., Any], args: Sequence[Any], device: str | torch.device, target: str = "<callable>",
             compile: bool = True, inductor_reason: str | None = None, steps: int = 5, warmup: int = 3,
             rounds: int = 3, iters: int = 10, recompile_calls: int = 4,
             progress: Callable[[str], None] | None = None) -> Diagnosis:
    """Run the five checks on `fn(*args)`. `inductor_reason`: why Inductor cannot compile here (None: it can)."""
    dev = torch.device(device).type
    args = tuple(args)
    say = progress or (lambda _m: None)

    def eager_call() -> Any:
        with torch.no_grad(), redirect_stdout(io.StringIO()):
            return fn(*args)

    check_result(target, eager_call())  # before any measurement: a result without tensors has nothing to diagnose
    say("graph breaks (explain)")
    brk = _breaks(fn, args)  # explain() resets Dynamo: do it before compiling anything
    say("recompiles (counting backend)")
    rec = _recompiles(fn, args, recompile_calls)
    compiled_prof: StepProfile | None = None
    methods: dict[str, Callable[[], Any]] = {Method.EAGER: eager_call}
    setup_s = None
    why_not = None
    if not compile:
        why_not = "--no-compile"
    elif inductor_reason:
        why_not = inductor_reason
    else:
        say("compiling (Inductor)")
        c = compile_first_call(fn, args, dev, reset=True)
        setup_s = c.setup_s

        def compiled_call() -> Any:
            with torch.no_grad(), redirect_stdout(io.StringIO()):
                return c.fn(*args)

        methods[Method.COMPILE_DEFAULT] = compiled_call
    say("timing (rotating rounds)")
    samples = time_methods(methods, clock_for(dev), rounds, iters, warmup)
    naive = None
    if dev == "cuda":  # what a host timer without synchronize() reads: launch rate, not work
        sync(dev)
        naive = sum(time_calls(eager_call, iters, HostClock())) / iters  # HostClock never synchronises
        sync(dev)
    # the profiles after every timing: a profiler session may slow every later launch (lab.measure.profiler_guard)
    say("profiling eager")
    eager_prof = profile_step(eager_call, dev, steps=steps, warmup=warmup)
    if Method.COMPILE_DEFAULT in methods:
        say("profiling compiled")
        compiled_prof = profile_step(methods[Method.COMPILE_DEFAULT], dev, steps=steps, warmup=warmup)
    eager_ms = median(flat(samples[Method.EAGER]))
    compiled_ms = median(flat(samples[Method.COMPILE_DEFAULT])) if Method.COMPILE_DEFAULT in samples else None
    checks = [_host_device(eager_prof, eager_ms, dev), _kernels(eager_prof, compiled_prof, why_not, dev), brk, rec,
              _steady(samples, rounds, setup_s, naive)]
    speedup = eager_ms / compiled_ms if compiled_ms else None
    interval = ratio_interval(samples[Method.EAGER], samples[Method.COMPILE_DEFAULT]) if compiled_ms else None
    kind, headline = verdict(checks, speedup, dev, interval)
    torch._dynamo.reset()
    return Diagnosis(target=target, device=dev, checks=checks, verdict=kind, headline=headline, eager_ms=eager_ms,
                     compiled_ms=compiled_ms, setup_s=setup_s, samples=samples)
