"""peer_generate: transformers' own `generate` on the same weights, beside the lab's step.

What a user would run instead of the lab: the transformers GPT-2 the lab itself is built from
(`lab.step.model`: the same object, or in a child process the same seeded build, checked by digest),
greedy, no end-of-text stop, in the variants transformers documents:
- `dynamic`: `generate` as it comes (DynamicCache: the cache grows by concatenation);
- `static`: `cache_implementation="static"` (StaticCache: fixed-size buffers), `disable_compile=True`
  (on CUDA transformers would otherwise compile on its own);
- `static+compile`: the static cache with transformers' automatic compile of the decoding forward
  (`generate` compiles when the cache is compileable and the device is CUDA: `GenerationMixin.
  _valid_auto_compile_criteria`), with its default `CompileConfig()` (Inductor, mode
  "reduce-overhead": cudagraph trees, fullgraph off, dynamic None); on the CPU the config's
  `_compile_all_devices` flag (transformers' testing switch) makes it compile there too;
- `static+compile-default`: the same with `CompileConfig(mode="default")` (no CUDA graphs).
Timing: a logits processor puts a clock mark (CUDA events on the GPU) after each generated token's
logits, so ms per token is the time between consecutive tokens of a whole `generate` call after
`warmup_calls` untimed calls: the user's view, loop overhead included. `first_call_s` is the wall
time of the first call (it compiles, for the compiled variants); `setup_s` is what the warm-up calls
took beyond steady calls. Tokens are compared with the lab's fixed step (eager) on the same prompts.

Variants that compile run in a child process (`isolated`): a crash there (the H200 once saw
"CUDAGraphs output overwritten" with reduce-overhead) is recorded as that variant's FAILED outcome
with the error, and the others carry on. The lab's methods (eager, graph, compile+graph, the hand-fused step) are timed
on the same prompts, reading the token back every step as a serving loop (and `generate`) does.
Stored: `speedup_vs_peer` of each lab method over the best transformers variant at its batch, with
its 95% interval (`speedup_ci_low`, `speedup_ci_high`, same params: lab.contract.intervals' bootstrap
over rounds, each generate call and each round of the lab's step one block; the two sides are drawn on
their own, not paired, since they were timed one after the other and share no round's drift), and the
conclusion drawn by `RULE`, which calls the lab's step faster or slower only where that interval
excludes 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import torch

from lab.measure import compiletrace
from lab.contract import intervals
from lab.contract import metrics as M
from lab.run.childproc import run_child
from lab.contract import notes as N
from lab.contract.names import Method, Param as P, Status
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common.sweep import conclude, measure_methods, prompt_for, provenance
from lab.measure.timing import clock_for, first_call
from lab.run.context import Context, stored_interval

Variant = Literal["dynamic", "static", "static+compile", "static+compile-default"]
COMPILED = ("static+compile", "static+compile-default")
RULE = ("Per batch: the lab's fastest method (lowest ms per step, token read back each step) against transformers' "
        "fastest variant that ran (lowest ms per token); the ratio is theirs over ours, with its 95% interval (rounds "
        "as blocks, the two sides drawn on their own); the lab's step is faster where the interval lies above 1, "
        "slower where below, else neither (lab.contract.intervals.versus). Variants that did not end OK are named "
        "with their outcome.")


@dataclass(frozen=True)
class Options:
    variants: tuple[Variant, ...] = option(("dynamic", "static", "static+compile"), "transformers generate variants")
    batches: tuple[int, ...] = option((1, 8), "batch sizes", minimum=1)
    new_tokens: int = option(64, "tokens each generate call produces", minimum=1)
    rounds: int = option(3, "timed generate calls per variant and batch", minimum=1)
    warmup_calls: int = option(2, "untimed generate calls first (the first compiles; reduce-overhead records its "
                                  "CUDA graphs on the next)")
    isolated: tuple[Variant, ...] = option(COMPILED, "variants run in a child process, so that a crash loses only them")
    lab_methods: tuple[Method, ...] = option((Method.EAGER, Method.GRAPH, Method.COMPILE_GRAPH, Method.FUSED),
                                             "the lab's step methods timed beside them (eager is the token reference)")
    child_timeout_s: float = option(420.0, "seconds a child process may take for one variant", minimum=1)
    traces: bool = option(True, "keep the compiled variants' traces in the run directory")


# ---------------------------------------------------------------------------- one variant (here or in a child)

def weights_digest(model: Any) -> str:
    """A digest of a few of the model's tensors: the same build gives the same digest."""
    h = hashlib.sha256()
    for t in (model.transformer.wte.weight, model.transformer.h[-1].mlp.c_proj.weight, model.transformer.ln_f.bias):
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def generation_config(variant: str, new_tokens: int, device: str) -> Any:
    from transformers import GenerationConfig

    kw: dict[str, Any] = {"max_new_tokens": new_tokens, "do_sample": False, "num_beams": 1,
                          "eos_token_id": None, "pad_token_id": 0}
    if variant == "dynamic":
        kw["disable_compile"] = True
    elif variant == "static":
        kw |= {"cache_implementation": "static", "disable_compile": True}
    else:
        from transformers import CompileConfig

        cc = CompileConfig() if variant == "static+compile" else CompileConfig(mode="default")
        if device != "cuda":
            cc._compile_all_devices = True  # transformers' switch for compiling off CUDA (its tests use it)
        kw |= {"cache_implementation": "static", "compile_config": cc}
    return GenerationConfig(**kw)


def run_variant(model: Any, variant: str, prompts: dict[int, list[list[int]]], new_tokens: int, warmup_calls: int,
                rounds: int, on_batch: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every batch of one variant: per-token ms samples (one list per timed call: a round), call walls, tokens, or
    the error (per batch).
    `on_batch` sees the results so far after each batch (a child saves them, in case the next batch kills it)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    device = next(model.parameters()).device
    clock = clock_for(device)

    class Marks(LogitsProcessor):
        """A clock mark after each token's logits; it keeps no tensor (a reduce-overhead output dies each step)."""

        def __init__(self) -> None:
            self.marks: list[Any] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            self.marks.append(clock.mark())
            return scores

    cfg = generation_config(variant, new_tokens, device.type)
    saved = model.config.eos_token_id, model.generation_config.eos_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = None  # the lab's steps never stop either
    out: dict[str, Any] = {}
    try:
        for batch, rows in prompts.items():
            ids = torch.tensor(rows, dtype=torch.long, device=device)

            def call() -> tuple[torch.Tensor, list[float]]:
                marks = Marks()
                with torch.no_grad():
                    gen = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg,
                                         logits_processor=LogitsProcessorList([marks]))
                clock.sync()
                return gen, [clock.elapsed_ms(a, b) for a, b in zip(marks.marks, marks.marks[1:])]

            entry: dict[str, Any] = {"warm_calls_s": [], "steady_calls_s": [], "ms_per_token": [], "error": None}
            try:
                for _ in range(max(1, warmup_calls)):
                    (gen, _), wall = first_call(call, device=device)
                    entry["warm_calls_s"].append(round(wall, 4))
                for _ in range(rounds):
                    (gen, samples), wall = first_call(call, device=device)
                    entry["steady_calls_s"].append(round(wall, 4))
                    entry["ms_per_token"].append([round(x, 5) for x in samples])
                entry["tokens"] = gen[:, ids.shape[1]:].cpu().tolist()
            except Exception as exc:  # one batch's failure is recorded; the next batch still runs
                entry["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:500] if str(exc) else ''}"
            out[str(batch)] = entry
            if on_batch is not None:
                on_batch(out)
    finally:
        model.config.eos_token_id, model.generation_config.eos_token_id = saved
    return out


def child_variant(model: dict[str, Any], provenance: dict[str, Any], device: str, variant: str,
                  prompts: dict[str, list[list[int]]], new_tokens: int, warmup_calls: int, rounds: int,
                  partial_path: str = "") -> dict[str, Any]:
    """In a fresh process: build the same GPT-2, run one variant, return its results and the weights' digest.
    After each batch the results so far are written to `partial_path`, so a crash loses only the batch it hit."""
    from lab.step.model import build_model
    from lab.contract.profiles import ModelSpec

    m = build_model(ModelSpec(**model), provenance, device=device)
    digest = weights_digest(m)

    def save(batches: dict[str, Any]) -> None:
        if partial_path:
            Path(partial_path).write_text(json.dumps({"digest": digest, "batches": batches}))

    result = run_variant(m, variant, {int(b): rows for b, rows in prompts.items()}, new_tokens, warmup_calls, rounds,
                         on_batch=save)
    return {"digest": digest, "batches": result}


# ---------------------------------------------------------------------------- the experiment

def _variant_results(ctx: Context[Options], model: Any, variant: str, prompts: dict[int, list[list[int]]]) -> dict[str, Any] | None:
    """Run one variant here or in a child; None (with the outcome recorded) when it did not run at all."""
    o, prof = ctx.options, ctx.profile
    if variant not in o.isolated:
        return run_variant(model, variant, prompts, o.new_tokens, o.warmup_calls, o.rounds)
    raw = Path(tempfile.mkdtemp(prefix="lab-trace-"))
    partial = raw / "partial.json"
    child = run_child("lab.experiments.peer_generate:child_variant",
                      {"model": dataclasses.asdict(prof.model), "provenance": provenance(ctx),
                       "device": ctx.device.type, P.VARIANT: variant,
                       "prompts": {str(b): rows for b, rows in prompts.items()}, "new_tokens": o.new_tokens,
                       "warmup_calls": o.warmup_calls, "rounds": o.rounds, "partial_path": str(partial)},
                      timeout_s=o.child_timeout_s, env=compiletrace.child_env(raw) if o.traces else None)
    value = child.value if child.ok else (json.loads(partial.read_text()) if partial.is_file() else None)
    if o.traces and variant in COMPILED:
        compiletrace.keep(ctx, f"transformers {variant}", raw)  # deletes the folder
    else:
        shutil.rmtree(raw, ignore_errors=True)
    if not child.ok:  # the batches it finished stand; the others failed (a crash) or did not run (out of time)
        ctx.note(N.CHILD.key_for(variant), child.as_dict())
        done = (value or {}).get("batches", {})
        for batch in prompts:
            if str(batch) not in done:
                ctx.metric(M.OUTCOME, Status.NOT_RUN if child.timed_out else Status.FAILED, impl="transformers",
                           variant=variant, batch=batch)
                ctx.note(N.ERRORS.key_for(variant, batch), f"the child process ended: {child.describe()}")
        if child.timed_out:
            ctx.skip(f"transformers {variant}", Code.PROFILE_BUDGET, f"the child process {child.describe()}: raise "
                     f"peer_generate.child_timeout_s (--set peer_generate.child_timeout_s=SECONDS)")
        else:
            ctx.skip(f"transformers {variant}", Code.CHILD_DIED, f"its child process ended: {child.describe()}")
        if value is None:
            return None
    same = value["digest"] == weights_digest(model)
    ctx.check(f"the child's weights equal this run's ({variant})", same, detail=f"digest {value['digest']}")
    return value["batches"]


Rounds = list[list[float]]


def _record_variant(ctx: Context[Options], variant: str, result: dict[str, Any], lab_tokens: dict[int, torch.Tensor]) -> dict[int, Rounds]:
    """Record one variant's batches; its per-call samples (one list per call) of each batch that ended OK."""
    ms: dict[int, Rounds] = {}
    for batch_text, entry in result.items():
        batch = int(batch_text)
        params = {P.IMPL: "transformers", P.VARIANT: variant, P.BATCH: batch}
        if entry["warm_calls_s"]:
            ctx.metric(M.FIRST_CALL_S, entry["warm_calls_s"][0], **params)
        if entry["error"]:
            ctx.metric(M.OUTCOME, Status.FAILED, **params)
            ctx.skip(f"transformers {variant} batch {batch}", Code.EXCEPTION, entry["error"])
            ctx.note(N.ERRORS.key_for(variant, batch), entry["error"])
            continue
        ctx.metric(M.OUTCOME, Status.OK, **params)
        steady = statistics.median(entry["steady_calls_s"])
        ctx.metric(M.SETUP_S, round(max(0.0, sum(entry["warm_calls_s"]) - len(entry["warm_calls_s"]) * steady), 4),
                   **params)
        ctx.timing(M.STEP_MS, entry["ms_per_token"], **params)
        ms[batch] = entry["ms_per_token"]
        ctx.note(N.CALLS.key_for(variant, batch), {"warm_s": entry["warm_calls_s"], "steady_s": entry["steady_calls_s"]})
        ref = lab_tokens.get(batch)
        if ref is not None:
            theirs = torch.tensor(entry["tokens"])
            k = min(theirs.shape[1], ref.shape[1])
            agree = (theirs[:, :k] == ref[:, :k]).float().mean().item()
            ctx.metrics({M.TOKEN_AGREEMENT: round(agree, 6), M.TOKENS_EQUAL: agree == 1.0}, **params)
            ctx.check(f"transformers {variant} tokens equal the lab's fixed step's (batch {batch})", agree == 1.0,
                      detail=f"agreement {agree:.4f} over {k} tokens", fatal=False, **params)
    return ms


def run(ctx: Context[Options]) -> None:
    o, prof = ctx.options, ctx.profile
    model, w = ctx.gpt2("float32")
    vocab = int(w.wte.shape[0])
    steps = min(o.new_tokens - 1, prof.max_len - prof.prompt_len - 2)
    ctx.note(N.SWEEP_CONFIG.key, {"variants": list(o.variants), "batches": list(o.batches), "new_tokens": o.new_tokens,
                        "rounds": o.rounds, "warmup_calls": o.warmup_calls, "isolated": list(o.isolated),
                        "lab_methods": list(o.lab_methods), "lab_steps": steps, "lab_max_len": prof.max_len,
                        "transformers": _transformers_version()})
    # the lab's methods first: their eager tokens are the reference for transformers' tokens
    lab_ms: dict[int, dict[str, Rounds]] = {}
    lab_tokens: dict[int, torch.Tensor] = {}
    for batch in o.batches:
        found = measure_methods(ctx, w, tuple(o.lab_methods), {P.IMPL: "lab", P.BATCH: batch}, batch=batch,
                                max_len=prof.max_len, prompt_len=prof.prompt_len, steps=steps, rounds=o.rounds,
                                warmup=prof.warmup, readback=True, profile_kernels=False, trace=o.traces)
        lab_ms[batch] = found.rounds
        if found.tokens is not None:
            lab_tokens[batch] = found.tokens[:, prof.prompt_len:prof.prompt_len + steps + 1]
    prompts = {b: prompt_for(vocab, b, prof.prompt_len, ctx.device, 7000 + b).cpu().tolist() for b in o.batches}
    peer_ms: dict[str, dict[int, Rounds]] = {}
    for variant in o.variants:
        if variant in COMPILED and not _has_compile_config():
            for b in o.batches:
                ctx.metric(M.OUTCOME, Status.NOT_RUN, impl="transformers", variant=variant, batch=b)
            ctx.skip(f"transformers {variant}", Code.NOT_APPLICABLE,
                     f"transformers {_transformers_version()} has no CompileConfig: install transformers >= 4.48")
            continue
        ctx.progress(f"transformers {variant}" + (" (child process)" if variant in o.isolated else ""))
        result = _variant_results(ctx, model, variant, prompts)
        if result is not None:
            peer_ms[variant] = _record_variant(ctx, variant, result, lab_tokens)
    _compare(ctx, lab_ms, peer_ms)


def _median(rounds: Rounds) -> float:
    return statistics.median([x for r in rounds for x in r])


def faster(ci: intervals.Interval | None) -> str:
    """What a speedup's interval says of the lab's step against transformers' (the rule's last clause)."""
    return {intervals.Relation.HIGHER: "the lab's faster", intervals.Relation.LOWER: "transformers' faster",
            intervals.Relation.SAME: "neither faster: the interval holds 1",
            intervals.Relation.UNKNOWN: "no interval: fewer than two rounds"}[intervals.versus(ci, 1.0)]


def _compare(ctx: Context[Options], lab_ms: dict[int, dict[str, Rounds]], peer_ms: dict[str, dict[int, Rounds]]) -> None:
    """`speedup_vs_peer` (with its interval) of each lab method at each batch, and the conclusion."""
    parts = []
    for batch, methods in lab_ms.items():
        theirs = {v: by_b[batch] for v, by_b in peer_ms.items() if batch in by_b and any(by_b[batch])}
        methods = {m: rs for m, rs in methods.items() if any(rs)}
        if not methods or not theirs:
            continue
        best_peer = min(theirs, key=lambda v: _median(theirs[v]))
        for method, rounds in methods.items():
            ctx.speedup(M.SPEEDUP_VS_PEER, theirs[best_peer], rounds, paired=False, impl="lab", method=method,
                        batch=batch, peer=best_peer)
        ours = min(methods, key=lambda m: _median(methods[m]))
        mine, peer = _median(methods[ours]), _median(theirs[best_peer])
        stored = {P.IMPL: "lab", P.METHOD: ours, P.BATCH: batch, P.PEER: best_peer}
        ci = stored_interval(ctx.record, M.SPEEDUP_VS_PEER, **stored)
        parts.append(f"at batch {batch} the lab's {ours} step takes {mine:.3g} ms against {peer:.3g} ms per token for "
                     f"transformers' {best_peer} ({peer / mine:.1f}x{' ' + ci.text() if ci else ''}: {faster(ci)})")
    failed = sorted({str(m.params[P.VARIANT]) for m in ctx.record.metrics
                     if m.name == M.OUTCOME.name and m.value != Status.OK})
    if parts:
        sentence = "; ".join(parts)
        sentence = sentence[0].upper() + sentence[1:]
    else:
        sentence = "No batch has both a lab step and a transformers variant measured"
    if failed:
        sentence += f"; did not end OK: {', '.join(failed)} (errors in the notes)"
    conclude(ctx, sentence + ".", RULE)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _has_compile_config() -> bool:
    try:
        from transformers import CompileConfig  # noqa: F401
    except ImportError:
        return False
    return True

