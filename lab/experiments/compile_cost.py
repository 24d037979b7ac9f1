"""compile_cost: what a compile costs before it pays, cold and warm, each in a fresh process.

Every first call is timed in its own child process (lab.run.childproc) with its own Inductor cache
directory: cold = an empty directory, warm = the directory the cold child populated. Nothing of
the parent (imported kernels, in-memory caches, Dynamo state) can leak in. Each child also times
the eager and the compiled target over interleaved rounds, so break-even is computed from the
saving measured in the same process as the compile (as the chapter did); `steady_ms` is reported
from the warm child, the state of a restarted server.

Targets: `decode_core` (the split step's compiled core, the profile's model, and its 2/6/12-layer
prefixes for compile time against depth) and `mlp` (the chapter's small MLP, several cold trials).
With `reuse_probe`, the MLP's warm cache is offered a different shape and a different dtype: the
FX graph cache must miss, which shows what a cache is valid for.

Children use seeded random weights of the profile's shapes: compile and step time depend on shapes
and dtype, not on values.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass
from typing import Any

from lab.contract import metrics as M
from lab.host.cache_dir import isolated_env
from lab.host.compile_cache import DROP_ENV, cache_counters, provenance
from lab.measure.breakeven import break_even_calls
from lab.locks import owned_tempdir
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.run.context import Context

MLP_DIMS = (256, 1024)  # in/out features, hidden features
MLP_BATCH = 16
STEADY = (Method.EAGER, Method.COMPILE_DEFAULT)  # what each child times after its first call


@dataclass(frozen=True)
class Options:
    depths: tuple[int, ...] | None = option(None, "model depths (layers) whose compile time is measured cold and "
                                                  "warm (default: the profile's model's full depth)",
                                            profile="model.n_layer")
    mlp_trials: int = option(3, "cold trials of the small MLP (0: no MLP)")
    batch: int = option(1, "batch of the decode core", minimum=1)
    rounds: int | None = option(None, "steady-state rounds in each child (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    steady_steps: int = option(10, "timed calls per steady-state round", minimum=1)
    warmup: int | None = option(None, "untimed calls before each round (default: the profile's warmup)",
                                profile="warmup")
    child_timeout_s: float = option(900.0, "seconds each child process may take", minimum=1)
    reuse_probe: bool = option(False, "offer the MLP's warm cache a different shape and dtype (both must miss)")


# ---------------------------------------------------------------------------- in the child process

def _random_weights(model: dict[str, Any], n_layer: int, device: str, dtype: str) -> Any:
    """A Weights of the profile's shapes with seeded random values (no transformers import in the child)."""
    import torch

    from lab.step.model import LayerWeights, Weights, torch_dtype

    dt = torch_dtype(dtype)
    g = torch.Generator().manual_seed(int(model.get("seed", 0)))
    E, V, P = int(model["n_embd"]), int(model["vocab_size"]), int(model["n_positions"])

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(device=device, dtype=dt)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=device, dtype=dt)

    # projections in the [out, in] layout of lab.step.model.Weights
    layers = tuple(LayerWeights(ones(E), r(E), r(3 * E, E), r(3 * E), r(E, E), r(E), ones(E), r(E),
                                r(4 * E, E), r(4 * E), r(E, 4 * E), r(E)) for _ in range(n_layer))
    return Weights(r(V, E), r(P, E), layers, ones(E), r(E), int(model["n_head"]), 1e-5)


def _build(target: str, model: dict[str, Any], n_layer: int, device: str, dtype: str, batch: int, max_len: int,
           prompt_len: int) -> tuple[Any, tuple[Any, ...], dict[str, list[int]]]:
    """(eager function, its arguments, shapes) for a target."""
    import torch

    from lab.step import decode
    from lab.step.model import torch_dtype

    if target == "mlp":
        d_in, hidden = MLP_DIMS
        dt = torch.float64 if dtype == "float64" else torch_dtype(dtype)  # float64: the reuse probe's other dtype
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d_in))
        mlp = mlp.to(device=device, dtype=dt).eval()
        x = torch.randn(batch, d_in, device=device, dtype=dt)
        return mlp, (x,), {"x": list(x.shape)}
    if target != "decode_core":
        raise ValueError(f"unknown compile_cost target {target!r} (decode_core, mlp)")
    w = _random_weights(model, n_layer, device, dtype)
    prompt = torch.randint(0, int(model["vocab_size"]), (batch, prompt_len), generator=torch.Generator().manual_seed(1))
    state = decode.prefilled(w, prompt.to(device), max_len)
    pos = state.pos
    x = torch.nn.functional.embedding(state.tok, w.wte) + w.wpe.index_select(0, pos)
    args = (x, state.slots == pos, state.slots > pos, state.caches, w)
    # Calling the core again with the same inputs writes the same cache slot with the same values:
    # repeated calls are the same work, so it can be timed without advancing the state.
    return decode.decode_core, args, {"x": list(x.shape), "caches": [list(c.shape) for c in state.caches]}


def child_first_call(target: str, model: dict[str, Any], n_layer: int, device: str, dtype: str, batch: int,
                     max_len: int, prompt_len: int, threads: int, rounds: int, steady_steps: int,
                     warmup: int) -> dict[str, Any]:
    """Child entry: time the first call of torch.compile(target), then eager vs compiled steady calls."""
    import torch
    from torch._dynamo.utils import counters

    from lab.measure.timing import clock_for, first_call, flat, sync, time_methods

    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    fn, args, shapes = _build(target, model, n_layer, device, dtype, batch, max_len, prompt_len)
    fn(*args)  # eager once: lazy initialisation is not compile time
    sync(device)
    # compiled by hand, not by compile_first_call: that one turns on C++ kernel profiling, a config the cache keys see
    compiled = torch.compile(fn)
    counters.clear()
    _, first_call_s = first_call(compiled, *args, device=device)
    hits = cache_counters()
    samples = time_methods({Method.EAGER: lambda: fn(*args), Method.COMPILE_DEFAULT: lambda: compiled(*args)},
                           clock_for(device), rounds, steady_steps, warmup)
    import torch._inductor.config as inductor_config

    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    return {"first_call_s": first_call_s, "counters": hits, "shapes": shapes,
            "steady": {m: flat(per) for m, per in samples.items()},
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "fx_graph_cache": bool(inductor_config.fx_graph_cache), "cache_dir": cache_dir,
            "cache_files": sum(len(f) for _, _, f in os.walk(cache_dir)) if cache_dir else 0}


# ---------------------------------------------------------------------------- in the parent

class ChildFailed(RuntimeError):
    pass


def _child(ctx: Context[Options], cache_dir: str, target: str, n_layer: int, dtype: str | None = None, batch: int | None = None,
           label: str = "") -> dict[str, Any]:
    import torch

    from lab.run.childproc import run_child

    p, o = ctx.profile, ctx.options
    kwargs = {P.TARGET: target, "model": dict(p.model.__dict__), P.N_LAYER: n_layer, "device": p.device,
              P.DTYPE: dtype or p.dtype, P.BATCH: batch or (MLP_BATCH if target == "mlp" else o.batch),
              P.MAX_LEN: p.max_len, "prompt_len": p.prompt_len, "threads": torch.get_num_threads(),
              "rounds": o.rounds, "steady_steps": o.steady_steps, "warmup": o.warmup}
    with ctx.activity(f"{label}: a fresh process compiles {target} (first call) and times it"):
        child = run_child("lab.experiments.compile_cost:child_first_call", kwargs,
                          timeout_s=o.child_timeout_s, env=isolated_env(cache_dir), drop_env=DROP_ENV)
    # where the experiment's time goes: each child's wall time beside its first call (the rest is the
    # interpreter, imports, CUDA start-up, the steady rounds and Inductor's compile workers)
    seen = dict(ctx.record.notes.get(N.CHILD_S.key, {}))
    seen[label] = {"wall_s": round(child.duration_s, 2),
                   "first_call_s": round(child.value["first_call_s"], 2) if child.ok and child.value else None}
    ctx.note(N.CHILD_S.key, seen)
    if not child.ok or child.value is None:
        raise ChildFailed(f"{label}: child process {child.describe()}")
    return child.value


def _cold_warm(ctx: Context[Options], root: str, target: str, n_layer: int, tag: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    cache_dir = tempfile.mkdtemp(prefix=f"{tag}-", dir=root)
    cold = _child(ctx, cache_dir, target, n_layer, label=f"{tag} cold")
    warm = _child(ctx, cache_dir, target, n_layer, label=f"{tag} warm")
    for phase, res in (("cold", cold), ("warm", warm)):
        c = res["counters"]
        ok = (c["fxgraph_cache_hit"] == 0 and c["fxgraph_cache_miss"] > 0) if phase == "cold" else \
            (c["fxgraph_cache_hit"] > 0 and c["fxgraph_cache_miss"] == 0)
        want = "misses only" if phase == "cold" else "hits only"
        ctx.check(f"{tag} {phase}: FX graph cache {want}", ok, detail=str(c), target=target, n_layer=n_layer)
    return cold, warm, cache_dir


def run(ctx: Context[Options]) -> None:
    import torch

    p = ctx.profile
    full = p.model.n_layer
    depths = list(ctx.options.depths)
    trials = ctx.options.mlp_trials
    ctx.note(N.SETTINGS.key, {"depths": depths, "mlp_trials": trials, "mlp": {"dims": MLP_DIMS, P.BATCH: MLP_BATCH},
                          "threads": torch.get_num_threads(), "device": p.device, P.DTYPE: p.dtype,
                          "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None})
    with owned_tempdir("compile-cost") as root_path:  # removed on the next start if this run is killed
        root = str(root_path)
        # 1. the decode core at full depth: cold, warm, steady, break-even
        cold, warm, cache_dir = _cold_warm(ctx, root, "decode_core", full, "decode_core")
        _record_target(ctx, "decode_core", full, cold, warm)
        ctx.note(N.CACHE_PROVENANCE.key_for("decode_core"),
                 provenance("decode_core", warm["shapes"], p.dtype, p.device, ctx.toolchain, cache_dir=None)
                 | {"threads": warm["threads"], "fx_graph_cache": warm["fx_graph_cache"]})

        # 2. compile time against depth (the full depth is the measurement above)
        for n in depths:
            if n == full:
                continue  # recorded with the decode core above (recording it twice would make two equal metrics)
            if n > full:
                ctx.skip(f"depth {n}", Code.DEPTH_EXCEEDS_MODEL, f"the profile's model has {full} layers; choose "
                                                                f"depths up to {full}")
                continue
            for phase, r in zip(("cold", "warm"), _cold_warm(ctx, root, "decode_core", n, f"decode_core[{n}]")):
                ctx.metric(M.FIRST_CALL_S, r["first_call_s"], phase=phase, target="decode_core", n_layer=n)

        # 3. the small MLP: cold trials, one warm, and (optionally) the cache offered another setting
        mlp_dir = ""
        for t in range(trials):
            mlp_dir = tempfile.mkdtemp(prefix=f"mlp{t}-", dir=root)
            r = _child(ctx, mlp_dir, "mlp", 0, label=f"mlp trial {t + 1} cold")
            ctx.metric(M.FIRST_CALL_S, r["first_call_s"], phase="cold", target="mlp", n_layer=0, trial=t + 1)
            close = r["counters"]["fxgraph_cache_miss"] > 0 and r["counters"]["fxgraph_cache_hit"] == 0
            ctx.check(f"mlp trial {t + 1} cold: FX graph cache misses only", close, detail=str(r["counters"]))
        if trials:
            warm_mlp = _child(ctx, mlp_dir, "mlp", 0, label="mlp warm")
            ctx.metric(M.FIRST_CALL_S, warm_mlp["first_call_s"], phase="warm", target="mlp", n_layer=0)
            ctx.check("mlp warm: FX graph cache hits only",
                      warm_mlp["counters"]["fxgraph_cache_hit"] > 0 and warm_mlp["counters"]["fxgraph_cache_miss"] == 0,
                      detail=str(warm_mlp["counters"]))
            _record_steady(ctx, "mlp", r, warm_mlp)
            if ctx.options.reuse_probe:
                _reuse_probe(ctx, mlp_dir, warm_mlp)
        else:
            ctx.skip("mlp", Code.DISABLED_IN_PROFILE, f"mlp_trials is 0 in the {p.name} profile (two more fresh "
                                                      "processes): set compile_cost.mlp_trials=1, as gpu-full does")


def _record_steady(ctx: Context[Options], target: str, cold: dict[str, Any], warm: dict[str, Any]) -> dict[str, float]:
    """steady_ms from the warm child; break-even per phase from the saving measured in that phase's process."""
    medians: dict[str, float] = {method: ctx.timing(M.STEADY_MS, warm["steady"][method], method=method,
                                                    target=target).median for method in STEADY}
    for phase, res in (("cold", cold), ("warm", warm)):
        eager_ms, comp_ms = (statistics.median(res["steady"][m]) for m in STEADY)
        ctx.metric(M.SAVING_MS_PER_CALL, eager_ms - comp_ms, phase=phase, target=target)
        calls = break_even_calls(res["first_call_s"], eager_ms, comp_ms)
        ctx.metric(M.BREAK_EVEN_CALLS, calls, phase=phase, target=target)
        if calls is None:
            ctx.note(N.NEVER_PAYS.key_for(target, phase), f"compiled {comp_ms:.3f} ms is not faster than eager "
                                                     f"{eager_ms:.3f} ms in the {phase} process: the compile never pays")
    return medians


def _record_target(ctx: Context[Options], target: str, n_layer: int, cold: dict[str, Any], warm: dict[str, Any]) -> None:
    for phase, res in (("cold", cold), ("warm", warm)):
        ctx.metric(M.FIRST_CALL_S, res["first_call_s"], phase=phase, target=target, n_layer=n_layer)
        ctx.note(N.COUNTERS.key_for(target, phase), res["counters"])
    _record_steady(ctx, target, cold, warm)


def _reuse_probe(ctx: Context[Options], cache_dir: str, same: dict[str, Any]) -> None:
    """Offer the MLP's populated cache a different batch (shape) and a different dtype: both must miss."""
    settings = {"same": same,
                "shape": _child(ctx, cache_dir, "mlp", 0, batch=MLP_BATCH * 2, label="mlp other shape"),
                P.DTYPE: _child(ctx, cache_dir, "mlp", 0, dtype="float64", label="mlp other dtype")}
    for setting, res in settings.items():
        c = res["counters"]
        reused = c["fxgraph_cache_hit"] > 0
        ctx.metric(M.CACHE_REUSED, reused, target="mlp", setting=setting)
        ctx.metric(M.FIRST_CALL_S, res["first_call_s"], phase=f"cache-{setting}", target="mlp", n_layer=0)
        expect = setting == "same"
        ctx.check(f"mlp cache {'reused' if expect else 'not reused'} under {setting} setting", reused == expect,
                  detail=f"{c}; shapes {res['shapes']}", fatal=False)
    ctx.note(N.CACHE_PROVENANCE.key_for("mlp"), provenance("mlp", same["shapes"], ctx.profile.dtype, ctx.profile.device,
                                                ctx.toolchain) | {"threads": same["threads"]})
