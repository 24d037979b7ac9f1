"""data_dependent_branch: stopping at end-of-sequence inside the step.

A serving loop stops a sequence once it produces the end-of-sequence (EOS) token, and every later
token of that row is EOS. Written the natural way, the step asks a question of a device value in
Python (`if state.done.any(): ...`), which is two problems for graph mode:
- Dynamo cannot trace a Python branch on a tensor's value: it breaks the graph there (two graphs,
  the host in between) and, under `fullgraph=True`, refuses the step with its reason;
- a CUDA graph records kernels, not Python: the branch needs the value on the host, a device sync,
  which is not allowed while a stream is capturing, so capture fails (tried in a child process, so
  that whatever the failure leaves behind cannot touch this run).
The rewrite keeps everything on the device: a done mask carried in the state and `torch.where`
choosing EOS for finished rows, so the step is one graph that captures; the host reads the mask
every `check_every` steps instead of every step.

Measured at each batch: Dynamo's graphs, breaks and reasons for both versions (explain), whether
each compiles under fullgraph and captures, each variant's setup and step time; correctness: with
the EOS id taken from the reference's own output (so the stop really happens), every variant's
tokens equal the eager host-checked step's; the step after which every row had stopped. Timing
runs use an EOS id that never occurs, so every variant does the same number of steps.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from lab.measure import compiletrace
from lab.step import decode, methods as stepmethods
from lab.contract import metrics as M
from lab.run.childproc import run_child
from lab.step.decode import DecodeState
from lab.measure.dynamo_tools import dynamo_counters, explain
from lab.step.graphs import GraphedStep
from lab.step.model import Weights
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common.sweep import conclude, free_device_memory, inductor_skip, prompt_for, provenance
from lab.measure.timing import first_call, rotating_rounds, time_calls
from lab.run.context import Context

HOST, WHERE = "host check", "torch.where"
RULE = ("The sentence states what the stored metrics say: graphs and breaks of each version (explain), whether "
        "each compiles as one graph and captures, whether all tokens equal the eager host-checked step's, and the "
        "fastest torch.where variant's step time against the fastest host-checked one's at the first batch.")


@dataclass
class EosState(DecodeState):
    """A decode state that also carries which rows have finished and the EOS id (device buffers)."""

    done: torch.Tensor  # [B, 1] bool: the row has produced EOS
    eos: torch.Tensor  # [1] int64: the end-of-sequence token id


def new_eos_state(w: Weights, batch: int, max_len: int, eos: int) -> EosState:
    base = decode.new_state(w, batch, max_len)
    return EosState(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                    done=torch.zeros(batch, 1, dtype=torch.bool, device=w.device),
                    eos=torch.tensor([eos], dtype=torch.long, device=w.device))


def step_host_check(state: EosState, w: Weights) -> torch.Tensor:
    """The natural way: a Python branch on a device value decides whether finished rows need fixing."""
    logits = decode.decode_step(state, w)
    if state.done.any():  # Dynamo breaks the graph here; capture would need a device sync here
        finished = torch.where(state.done, state.eos, state.tok)
        state.tok.copy_(finished)
        state.out.index_copy_(1, state.pos, finished)
    state.done.logical_or_(state.tok == state.eos)
    return logits


def step_masked(state: EosState, w: Weights) -> torch.Tensor:
    """The rewrite: finished rows get EOS through torch.where, always; no host decision, one graph."""
    logits = decode.decode_step(state, w)
    nxt = torch.where(state.done, state.eos, state.tok)
    state.tok.copy_(nxt)
    state.out.index_copy_(1, state.pos, nxt)  # decode_step advanced pos: this step's token sits at slot pos
    state.done.logical_or_(nxt == state.eos)
    return logits


STEPS: dict[str, Callable[[EosState, Weights], torch.Tensor]] = {HOST: step_host_check, WHERE: step_masked}


@dataclass(frozen=True)
class Options:
    batches: tuple[int, ...] = option((1,), "batch sizes", minimum=1)
    steps: int = option(32, "decode steps per round", minimum=1)
    rounds: int = option(3, "rounds, variants in rotating order", minimum=1)
    check_every: int = option(8, "the torch.where loop reads the done mask back every this many steps", minimum=1)
    eos_at: int | None = option(None, "the reference's step whose row-0 token becomes the EOS id (none: steps/2)")
    compile_host_check: bool = option(True, "also compile the host-checked step with graph breaks (two more compiles)")
    isolate_capture: bool = option(True, "try to capture the host-checked step in a child process (CUDA)")
    traces: bool = option(True, "keep each compile's trace in the run directory")


@dataclass
class Variant:
    name: str  # "<method>, <version>"
    state: EosState
    call: Callable[[], Any]
    graphed: GraphedStep | None = None
    check_every: int = 1


def _start(v: Variant, w: Weights, prompt: torch.Tensor, eos: int) -> None:
    decode.prefill(v.state, w, prompt)
    v.state.eos.fill_(eos)
    v.state.done.copy_(v.state.tok == v.state.eos)  # the prefill's token may already be EOS
    if v.graphed is not None:
        v.graphed.sync_position()


def _run(v: Variant, w: Weights, prompt: torch.Tensor, eos: int, steps: int, clock: Any) -> list[float]:
    """Per-step ms: the host-checked loop learns about the stop inside its step; the where loop every k steps."""
    _start(v, w, prompt, eos)
    done = [0]

    def one() -> None:
        v.call()
        done[0] += 1
        if done[0] % v.check_every == 0:
            # The host learns whether every row is done (a device sync). A serving loop would stop when it
            # is; here the timing runs use an EOS id that never comes and the correctness run goes on past
            # the stop (finished rows keep emitting EOS), so every variant runs the same steps.
            v.state.done.all().item()

    with torch.no_grad():
        return time_calls(one, steps, clock)


def _compiled(version: str, fullgraph: bool) -> Callable[..., Any]:
    """Compiled by hand, not by stepmethods.build: the step runs on an EosState (a stop flag), which build does not make."""
    spec = stepmethods.MethodSpec(Method.COMPILE_DEFAULT, compiled=True, fullgraph=fullgraph, step=STEPS[version])
    return torch.compile(stepmethods.compile_entry(spec, dynamic=False), fullgraph=fullgraph, dynamic=False)


def _build(ctx: Context[Options], w: Weights, prompt: torch.Tensor, method: str, version: str, batch: int) -> Variant | None:
    """One variant made ready (compile and/or capture timed as setup), or None when it cannot be (recorded)."""
    o, prof = ctx.options, ctx.profile
    name = f"{method}, {version}"
    params = {P.BATCH: batch, P.VARIANT: name}
    state = new_eos_state(w, batch, prof.max_len, -1)
    decode.prefill(state, w, prompt)
    fn: Callable[..., Any] = STEPS[version]
    setup = 0.0
    if method in (Method.COMPILE_DEFAULT, Method.COMPILE_GRAPH):
        if inductor_skip(ctx, name):
            return None
        fn = _compiled(version, fullgraph=(version == WHERE))
        before = dynamo_counters()
        saved = state.snapshot()
        with compiletrace.traced(ctx, f"{name} batch={batch}", enabled=o.traces), torch.no_grad():
            _, setup = first_call(lambda: [fn(state, w) for _ in range(max(1, prof.warmup))], device=ctx.device)
        state.restore(saved)
        after = dynamo_counters()
        ctx.metric(M.DYNAMO_GRAPHS, stepmethods._counter_delta(before, after)["graphs"], **params)
    graphed = None
    if method in (Method.GRAPH, Method.COMPILE_GRAPH):
        graphed = GraphedStep(fn, state, w, warmup=prof.warmup)
        setup += graphed.capture_s
        call = graphed.replay
    else:
        def call(fn: Callable[..., Any] = fn) -> Any:
            return fn(state, w)
    ctx.metric(M.SETUP_S, round(setup, 4), **params)
    return Variant(name, state, call, graphed, check_every=1 if version == HOST else o.check_every)


def capture_child(model: dict[str, Any], provenance: dict[str, Any], batch: int, max_len: int, prompt_len: int,
                  result_path: str = "") -> dict[str, Any]:
    """In a fresh process: try to capture the host-checked step; how it went, never raising. The answer is also
    written to `result_path` at once, in case the process then dies on its way out."""
    result = _try_capture(model, provenance, batch, max_len, prompt_len)
    if result_path:
        Path(result_path).write_text(json.dumps(result))
    return result


def _try_capture(model: dict[str, Any], provenance: dict[str, Any], batch: int, max_len: int,
                 prompt_len: int) -> dict[str, Any]:
    from lab.step.capture import capture
    from lab.step.model import build_model, extract_weights
    from lab.contract.profiles import ModelSpec

    if not torch.cuda.is_available():
        return {"captured": False, "error": "no CUDA device in the child"}
    spec = ModelSpec(**model)
    w = extract_weights(build_model(spec, provenance, device="cuda"))
    state = new_eos_state(w, batch, max_len, -1)
    decode.prefill(state, w, prompt_for(spec.vocab_size, batch, prompt_len, torch.device("cuda"), 14000))
    try:
        capture(step_host_check, state, w, warmup=1)
    except Exception as exc:  # the finding: what capture says about a host-side branch
        chain, e = [], exc  # capture's exit often raises again; the first error says why
        while e is not None and len(chain) < 4:
            chain.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")
            e = e.__context__
        return {"captured": False, "error": " <- ".join(reversed(chain))}
    return {"captured": True, "error": ""}


def _dynamo_report(ctx: Context[Options], w: Weights, prompt: torch.Tensor, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for version, step in STEPS.items():
        state = new_eos_state(w, batch, ctx.profile.max_len, -1)
        decode.prefill(state, w, prompt)
        ex = explain(step, state, w)
        ctx.metrics({M.GRAPHS: ex.graphs, M.GRAPH_BREAKS: ex.breaks}, batch=batch, version=version)
        ctx.note(N.BREAK_REASONS.key_for(version, batch), ex.reasons)
        out[version] = {"graphs": ex.graphs, "breaks": ex.breaks, "reasons": ex.reasons}
    torch._dynamo.reset()
    for version in STEPS:  # does the step compile as one graph? (fails at tracing, before any code generation)
        state = new_eos_state(w, batch, ctx.profile.max_len, -1)
        decode.prefill(state, w, prompt)
        try:
            torch.compile(stepmethods.compile_entry(stepmethods.MethodSpec(
                Method.COMPILE_DEFAULT, compiled=True, step=STEPS[version], backend="eager"), dynamic=False),
                backend="eager", fullgraph=True, dynamic=False)(state, w)
            ok, reason = True, ""
        except stepmethods._one_graph_errors() as exc:
            ok, reason = False, stepmethods.dynamo_reason(exc)
        ctx.metric(M.STEP_COMPILES, ok, batch=batch, version=version, fullgraph=True)
        if reason:
            ctx.note(N.FULLGRAPH_ERROR.key_for(version, batch), reason)
        out[version][P.FULLGRAPH] = ok
    return out


def _capture_report(ctx: Context[Options], batch: int) -> bool | None:
    o, prof = ctx.options, ctx.profile
    if ctx.device.type != "cuda":
        ctx.skip(f"capture of the host-checked step (batch {batch})", Code.NO_CUDA,
                 "capture needs a CUDA device: run the gpu-sweep profile")
        return None
    if not o.isolate_capture:
        ctx.skip(f"capture of the host-checked step (batch {batch})", Code.DISABLED_IN_PROFILE,
                 "set data_dependent_branch.isolate_capture=true to try it in a child process")
        return None
    with tempfile.TemporaryDirectory(prefix="lab-capture-") as tmp:
        early = Path(tmp) / "result.json"
        child = run_child("lab.experiments.data_dependent_branch:capture_child",
                          {"model": dataclasses.asdict(prof.model), "provenance": provenance(ctx), P.BATCH: batch,
                           P.MAX_LEN: prof.max_len, "prompt_len": prof.prompt_len, "result_path": str(early)},
                          timeout_s=300)
        value = child.value if child.ok else (json.loads(early.read_text()) if early.is_file() else None)
    variant = f"{Method.GRAPH}, {HOST}"
    if not child.ok and value is not None:  # it answered, then died on its way out: the answer stands, noted
        ctx.note(N.CAPTURE_CHILD_EXIT.key_for(batch), child.as_dict())
    elif not child.ok:
        ctx.note(N.CAPTURE_CHILD.key_for(batch), child.as_dict())
        if child.timed_out or "captur" not in child.stderr_tail.lower():  # not the capture's doing: no finding
            ctx.skip(f"capture of the host-checked step (batch {batch})", Code.CHILD_DIED, child.describe())
            return None
        ctx.metric(M.CAPTURES, False, batch=batch, variant=variant)  # capturing ended the process: the finding
        ctx.note(N.CAPTURE_ERROR.key_for(batch), f"the process died while capturing: {child.describe()}")
        return False
    ctx.metric(M.CAPTURES, bool(value["captured"]), batch=batch, variant=variant)
    ctx.note(N.CAPTURE_ERROR.key_for(batch), value["error"])
    return bool(value["captured"])


def _stopped_at(out: torch.Tensor, prompt_len: int, eos: int) -> int | None:
    """The step after which every row had produced EOS (1-based over the generated tokens), or None."""
    gen = out[:, prompt_len:]
    hits = [(row == eos).nonzero() for row in gen]
    if any(h.numel() == 0 for h in hits):
        return None
    return int(max(int(h[0]) for h in hits)) + 1


def run(ctx: Context[Options]) -> None:
    o, prof = ctx.options, ctx.profile
    _, w = ctx.gpt2("float32")
    cuda = ctx.device.type == "cuda"
    methods = [Method.EAGER, Method.COMPILE_DEFAULT] + ([Method.GRAPH, Method.COMPILE_GRAPH] if cuda else [])
    if not cuda:
        ctx.skip(f"{Method.GRAPH} and {Method.COMPILE_GRAPH}, {WHERE}", Code.NO_CUDA,
                 "manual capture needs a CUDA device: run the gpu-sweep profile")
    eos_at = o.eos_at if o.eos_at is not None else max(1, o.steps // 2)
    ctx.note(N.SWEEP_CONFIG.key, {"batches": list(o.batches), P.STEPS: o.steps, "rounds": o.rounds, "check_every": o.check_every,
                        "eos_at": eos_at, "methods": list(methods)})
    summary: dict[str, Any] = {}
    for batch in o.batches:
        prompt = prompt_for(int(w.wte.shape[0]), batch, prof.prompt_len, ctx.device, 15000 + batch)
        report = _dynamo_report(ctx, w, prompt, batch)
        captured = _capture_report(ctx, batch)
        variants: dict[str, Variant] = {}
        for method in methods:
            for version in (HOST, WHERE):
                if version == HOST and method in (Method.GRAPH, Method.COMPILE_GRAPH):
                    continue  # the host-checked step cannot be captured: _capture_report says what happens
                if version == HOST and method == Method.COMPILE_DEFAULT and not o.compile_host_check:
                    ctx.skip(f"{method}, {HOST}", Code.DISABLED_IN_PROFILE,
                             "set data_dependent_branch.compile_host_check=true to compile it (with its break)")
                    continue
                v = _build(ctx, w, prompt, method, version, batch)
                if v is not None:
                    variants[v.name] = v
        # correctness: a real EOS, taken from the reference's own tokens
        ref = variants[f"{Method.EAGER}, {HOST}"]
        _run(ref, w, prompt, -1, o.steps, ctx.clock)
        eos = int(ref.state.out[0, prof.prompt_len + eos_at])
        outs = {}
        for name, v in variants.items():
            _run(v, w, prompt, eos, o.steps, ctx.clock)
            outs[name] = v.state.out.cpu().clone()
        stopped = _stopped_at(outs[ref.name], prof.prompt_len, eos)
        ctx.metric(M.STOPPED_AT_STEP, stopped, batch=batch, eos=eos)
        for name, out in outs.items():
            if name == ref.name:
                continue
            equal = bool(torch.equal(out, outs[ref.name]))
            ctx.metric(M.TOKENS_EQUAL, equal, batch=batch, variant=name)
            ctx.check(f"{name} tokens equal the eager host-checked step's (batch {batch})", equal, batch=batch,
                      variant=name)
        samples = rotating_rounds({n: (lambda v=v: _run(v, w, prompt, -1, o.steps, ctx.clock))
                                   for n, v in variants.items()}, o.rounds)
        ms = {name: ctx.timing(M.STEP_MS, per_round, batch=batch, variant=name).median
              for name, per_round in samples.items()}
        for name in ms:
            if name != ref.name:
                ctx.speedup(M.SPEEDUP_VS_EAGER, samples[ref.name], samples[name], batch=batch, variant=name)
        summary[str(batch)] = {"dynamo": report, "captured": captured, "ms": ms, "stopped": stopped,
                               "all_equal": all(torch.equal(out, outs[ref.name]) for out in outs.values())}
        del variants
        free_device_memory(ctx.device)
    conclude(ctx, _sentence(summary), RULE)


def _sentence(summary: dict[str, Any]) -> str:
    batch, s = next(iter(summary.items()))
    d = s["dynamo"]
    host, where = d[HOST], d[WHERE]
    parts = [f"Dynamo splits the host-checked step into {host['graphs']} graphs with {host['breaks']} break(s)"
             + ("" if host[P.FULLGRAPH] else " and refuses it under fullgraph"),
             f"the torch.where version is {where['graphs']} graph with {where['breaks']} breaks"
             + (" and compiles under fullgraph" if where[P.FULLGRAPH] else " but does not compile under fullgraph")]
    if s["captured"] is not None:
        parts.append("capture of the host-checked step " + ("succeeds" if s["captured"] else "fails"))
    parts.append("every variant's tokens " + ("equal" if s["all_equal"] else "do NOT all equal")
                 + " the eager host-checked step's")
    ms = s["ms"]
    hosts = {k: v for k, v in ms.items() if k.endswith(HOST)}
    wheres = {k: v for k, v in ms.items() if k.endswith(WHERE)}
    if hosts and wheres:
        bh, bw = min(hosts, key=hosts.get), min(wheres, key=wheres.get)
        parts.append(f"at batch {batch} the fastest rewrite ({bw}) takes {wheres[bw]:.3g} ms per step against "
                     f"{hosts[bh]:.3g} ms for the fastest host-checked one ({bh}), {hosts[bh] / wheres[bw]:.2f}x")
    return "; ".join(parts) + "."
