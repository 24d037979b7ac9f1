"""What the sweep experiments share: model shapes, fast random weights, a time budget, one measured
comparison of step methods at one shape, the copy bandwidth, and the recorded conclusion.

`measure_methods` is the sweeps' version of cuda_graph_decode's per-batch measurement: each method
(a row of lab.step.methods) is built once (setup timed, compile traced), decoded once outside the
timed path for correctness against eager, profiled for kernels per step, then timed in rotating
rounds; it records step time, speedup and saving over eager, kernels, FLOPs per kernel and MBU
under the params it is given. A method that needs CUDA on a CPU host, or that would compile past
the budget, is a skipped part with its reason, never silently absent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from lab.step import ceilings, methods as stepmethods
from lab.measure import compiletrace
from lab.contract import metrics as M
from lab.step.model import LayerWeights, Weights, torch_dtype
from lab.contract.names import Method
from lab.contract.profiles import GPT2, TINY, ModelSpec
from lab.contract.reasons import Code
from lab.contract.results import ok_record
from lab.measure.timing import rotating_rounds

# GPT-2's published shapes (layers, width, heads); vocabulary 50257, 1024 positions. The tiny ones are
# for the smoke profile: the same code on a model a CPU steps through in milliseconds.
SHAPES: dict[str, ModelSpec] = {
    "gpt2-124M": GPT2,
    "gpt2-355M": ModelSpec("gpt2-355M", n_layer=24, n_embd=1024, n_head=16),
    "gpt2-774M": ModelSpec("gpt2-774M", n_layer=36, n_embd=1280, n_head=20),
    "gpt2-1.5B": ModelSpec("gpt2-1.5B", n_layer=48, n_embd=1600, n_head=25),
    "tiny-2L": TINY,
    "tiny-4L": ModelSpec("tiny-4L", n_layer=4, n_embd=96, n_head=4, vocab_size=512, n_positions=128, init_std=0.3),
}


def parameters(spec: ModelSpec) -> int:
    """Parameters of a GPT-2 shape (tied lm_head counted once)."""
    E, L = spec.n_embd, spec.n_layer
    per_layer = 12 * E * E + 13 * E  # qkv, proj, fc, fc2 weights and biases, two layer norms
    return spec.vocab_size * E + spec.n_positions * E + L * per_layer + 2 * E


def random_weights(spec: ModelSpec, device: str | torch.device, dtype: str, seed: int | None = None) -> Weights:
    """Seeded random weights of a GPT-2 shape, made on the device and then cast (seconds even for 1.5B on a GPU).

    GPT-2's init with `spec.init_std` (as transformers.GPT2Config(initializer_range=init_std) draws
    it): normal weights, the two residual projections scaled by 1/sqrt(2 x layers), layer norms at
    1, biases at 0; the layout is the lab's [out, in]. Drawn in fp32, so the bf16 weights are the
    fp32 ones rounded.
    """
    dev, dt = torch.device(device), torch_dtype(dtype)
    g = torch.Generator(device=dev).manual_seed(spec.seed if seed is None else seed)
    E, V, P, L = spec.n_embd, spec.vocab_size, spec.n_positions, spec.n_layer
    std, resid = spec.init_std, spec.init_std / math.sqrt(2 * L)

    def normal(rows: int, cols: int, sd: float) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=g, device=dev) * sd).to(dt)

    def const(n: int, value: float) -> torch.Tensor:
        return torch.full((n,), value, device=dev, dtype=dt)

    layers = tuple(LayerWeights(
        ln1_w=const(E, 1.0), ln1_b=const(E, 0.0), attn_w=normal(3 * E, E, std), attn_b=const(3 * E, 0.0),
        proj_w=normal(E, E, resid), proj_b=const(E, 0.0), ln2_w=const(E, 1.0), ln2_b=const(E, 0.0),
        fc_w=normal(4 * E, E, std), fc_b=const(4 * E, 0.0), fc2_w=normal(E, 4 * E, resid), fc2_b=const(E, 0.0))
        for _ in range(L))
    return Weights(wte=normal(V, E, std), wpe=normal(P, E, std), layers=layers, ln_f_w=const(E, 1.0),
                   ln_f_b=const(E, 0.0), n_head=spec.n_head, eps=1e-5)


def prompt_for(vocab: int, batch: int, length: int, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@dataclass
class Budget:
    """A cap on an experiment's expensive parts (compiles): seconds since the start and/or a count.

    `why_not()` is None while another compile fits, else the sentence a skipped part carries."""

    seconds: float | None = None
    compiles: int | None = None
    option: str = "budget_s"  # how the user lifts it, for the message
    start: float = field(default_factory=time.perf_counter)
    used: int = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def why_not(self) -> str | None:
        if self.compiles is not None and self.used >= self.compiles:
            return (f"the profile allows {self.compiles} compile(s) in this experiment; raise max_compiles "
                    f"(--set EXP.max_compiles=N, or none) to include this one")
        if self.seconds is not None and self.elapsed() > self.seconds:
            return (f"the experiment had run {self.elapsed():.0f} s of its {self.seconds:.0f} s budget; raise "
                    f"{self.option} (--set EXP.{self.option}=SECONDS) to include this one")
        return None

    def spend(self) -> None:
        self.used += 1


def copy_bandwidth(ctx: Any) -> float:
    """This host's copy bandwidth in GB/s: the ceilings experiment's of this run, else measured here (recorded)."""
    rec = ok_record(ctx.results.experiments, "ceilings") if ctx.results is not None else None
    if rec is not None:
        found = [m for m in rec.metrics if m.name == M.BANDWIDTH_GBPS.name and m.params.get("kind") == "copy"]
        if found and found[0].value:
            ctx.metric(M.BANDWIDTH_GBPS, found[0].value, kind="copy", source="ceilings")
            return float(found[0].value)
    nbytes = (1 << 30) if ctx.device.type == "cuda" else (64 << 20)
    best = max(ceilings.copy_bandwidth_gbps(ctx.device, nbytes, clock=ctx.clock))
    ctx.metric(M.BANDWIDTH_GBPS, round(best, 2), kind="copy", source="measured here", bytes=nbytes)
    return best


def conclude(ctx: Any, sentence: str, rule: str) -> None:
    """The experiment's one-sentence conclusion, and the rule that drew it from the stored numbers."""
    ctx.metric(M.CONCLUSION, sentence)
    ctx.note("conclusion_rule", rule)


def inductor_missing(ctx: Any) -> Any:
    """The toolchain's reason Inductor cannot compile for this run's device (a Reason), or None when it can."""
    toolchain = getattr(ctx, "toolchain", None)
    return None if toolchain is None else toolchain.reason_for("inductor", ctx.device.type)


def provenance(ctx: Any) -> dict[str, Any]:
    """Where this run's GPT-2 weights came from (the manifest's `weights`), for a child process to build the same."""
    from lab.step.model import resolve_weights

    weights = (ctx.results.manifest or {}).get("weights") if ctx.results is not None else None
    return dict(weights) if weights else resolve_weights(ctx.profile.model, None)


def label(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def needs_cuda(name: str) -> bool:
    """Whether a step method can only run on CUDA (manual capture, cudagraph trees)."""
    spec = stepmethods.method_spec(name)
    return spec.graphed or spec.tree_steps


@dataclass
class Measured:
    """What measure_methods found for one shape: median ms per method, and eager's tokens."""

    ms: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, int] = field(default_factory=dict)
    tokens: torch.Tensor | None = None


def measure_methods(ctx: Any, w: Weights, methods: tuple[str, ...], params: dict[str, Any], *, batch: int,
                    max_len: int, prompt_len: int, steps: int, rounds: int, warmup: int, budget: Budget | None = None,
                    dynamic: bool | None = False, readback: bool = False, bandwidth: float | None = None,
                    fatal: bool | Callable[[str], bool] = True, trace: bool = True,
                    profile_kernels: bool = True) -> Measured:
    """Build, check, profile and time each method at one shape; record under `params` every metric of these that
    the experiment's catalogue entry declares (an experiment that does not report MBU simply does not declare it)."""
    out = Measured()

    def rec(spec: M.MetricSpec, value: Any, **p: Any) -> None:
        if spec in ctx.spec.metrics:
            ctx.metric(spec, value, **params, **p)

    prompt = prompt_for(int(w.wte.shape[0]), batch, prompt_len, ctx.device, 7000 + batch)
    built: dict[str, stepmethods.StepMethod] = {}
    for name in methods:
        spec = stepmethods.method_spec(name)
        item = f"{name} {label(params)}"
        if needs_cuda(name) and ctx.device.type != "cuda":
            ctx.skip(item, Code.NO_CUDA, f"{name} captures CUDA graphs: run on a host where torch sees a CUDA device")
            continue
        missing = inductor_missing(ctx) if spec.compiled and spec.backend == "inductor" else None
        if missing is not None:
            ctx.skip(item, missing.code, missing.message)
            continue
        why = budget.why_not() if (budget is not None and spec.compiled) else None
        if why is not None:
            ctx.skip(item, Code.PROFILE_BUDGET, why)
            continue
        ctx.progress(f"{label(params)}: preparing {name}")
        try:
            with compiletrace.traced(ctx, item, enabled=trace and spec.compiled):
                m = stepmethods.build(name, w, prompt, max_len, warmup=warmup, dynamic=dynamic)
        except stepmethods.FullGraphError as exc:
            ctx.check(f"{name} compiles the step as one graph ({label(params)})", False, detail=exc.reason, **params,
                      method=name)
            continue
        finally:
            if budget is not None and spec.compiled:
                budget.spend()
        built[name] = m
        rec(M.SETUP_S, round(m.setup_s, 4), method=name)
    if not built:
        return out
    ref_name = Method.EAGER if Method.EAGER in built else next(iter(built))
    for m in built.values():  # correctness, outside the timed path
        m.decode(steps, ctx.clock, readback=False)
    ref = built[ref_name]
    out.tokens = ref.tokens()
    end = prompt_len + steps + 1
    for name, m in built.items():
        if name == ref_name:
            continue
        agree = (m.tokens()[:, prompt_len:end] == out.tokens[:, prompt_len:end]).float().mean().item()
        diff = (m.logits.float() - ref.logits.float()).abs().max().item() if m.logits is not None else None
        rec(M.TOKEN_AGREEMENT, round(agree, 6), method=name)
        rec(M.MAX_LOGIT_DIFF, diff, method=name)
        rec(M.TOKENS_EQUAL, agree == 1.0, method=name)
        ctx.check(f"{name} tokens equal {ref_name}'s ({label(params)})", agree == 1.0,
                  detail=f"agreement {agree:.4f}, max logit diff {diff if diff is None else f'{diff:.3g}'}",
                  fatal=fatal(name) if callable(fatal) else fatal, **params, method=name)
    flops = ceilings.step_flops(w, batch, max_len)
    nbytes = ceilings.step_bytes(w, batch, max_len)
    if profile_kernels:
        for name, m in built.items():
            m.start()
            k = stepmethods.count_kernels(m.call, ctx.device)
            out.kernels[name] = k["kernels"]
            rec(M.KERNELS_PER_STEP, k["kernels"], method=name)
            rec(M.FLOPS_PER_KERNEL, round(flops / max(1, k["kernels"])), method=name)
            if k["device_us"] is not None:
                rec(M.KERNEL_TIME_PER_STEP_US, round(k["device_us"], 2), method=name)
    samples = rotating_rounds({n: (lambda m=m: m.decode(steps, ctx.clock, readback=readback))
                               for n, m in built.items()}, rounds)
    for name, per_round in samples.items():
        sp = ctx.timing(M.STEP_MS, [x for r in per_round for x in r], **params, method=name)
        out.ms[name] = sp.median
        if bandwidth:
            rec(M.MBU, round(nbytes / (sp.median / 1e3) / 1e9 / bandwidth, 4), method=name)
    if Method.EAGER in out.ms:
        for name, ms in out.ms.items():
            if name != Method.EAGER:
                rec(M.SPEEDUP_VS_EAGER, round(out.ms[Method.EAGER] / ms, 4), method=name)
                rec(M.SAVING_MS_PER_STEP, round(out.ms[Method.EAGER] - ms, 5), method=name)
    del built
    free_device_memory(ctx.device)
    return out
