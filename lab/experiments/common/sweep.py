"""What the sweep experiments share: model shapes, fast random weights, a time budget, one measured
comparison of step methods at one shape, the copy bandwidth, and the recorded conclusion.

`measure_methods` measures the step methods at one shape the way cuda_graph_decode does (it is the same
code: lab.experiments.common.methods): built once (setup timed, compile traced), checked outside the
timed path by the correctness rule, timed in rotating rounds, then profiled; it records step time,
speedup (with its interval) and saving over eager, kernels, FLOPs per kernel and MBU under the params
it is given. A method that needs CUDA on a CPU host, or that would compile past the budget, is a
skipped part with its reason, never silently absent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.contract import metrics as M, notes
from lab.experiments.common import methods
from lab.measure import profiler_guard
from lab.step import ceilings
from lab.step.model import LayerWeights, Weights, torch_dtype
from lab.contract.profiles import ModelSpec
from lab.contract import query
from lab.contract.names import Experiment
from lab.contract.reasons import Code

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
    rec = query.ok(ctx.results.experiments, Experiment.CEILINGS) if ctx.results is not None else None
    found = query.maybe(rec, M.BANDWIDTH_GBPS, kind="copy")
    if found is not None and found.value:
        ctx.metric(M.BANDWIDTH_GBPS, found.value, kind="copy", source=Experiment.CEILINGS)
        return float(found.value)
    nbytes = (1 << 30) if ctx.device.type == "cuda" else (64 << 20)
    best = max(ceilings.copy_bandwidth_gbps(ctx.device, nbytes, clock=ctx.clock))
    ctx.metric(M.BANDWIDTH_GBPS, round(best, 2), kind="copy", source="measured here", bytes=nbytes)
    return best


def conclude(ctx: Any, sentence: str, rule: str) -> None:
    """The experiment's one-sentence conclusion, and the rule that drew it from the stored numbers."""
    ctx.metric(M.CONCLUSION, sentence)
    ctx.note(notes.CONCLUSION_RULE.key, rule)


def inductor_skip(ctx: Any, item: str) -> bool:
    """Record `item` as skipped (with the toolchain's reason) when Inductor cannot compile for this run's device;
    True if skipped."""
    toolchain = getattr(ctx, "toolchain", None)
    reason = None if toolchain is None else toolchain.reason_for("inductor", ctx.device.type)
    if reason is not None:
        ctx.skip(item, reason.code, reason.message)
    return reason is not None


def cuda_skip(ctx: Any, item: str) -> bool:
    """Record `item` as skipped when the run is not on a CUDA device (graph replay needs one); True if skipped."""
    skip: bool = ctx.device.type != "cuda"
    if skip:
        ctx.skip(item, Code.NO_CUDA, "CUDA graph capture and replay need a CUDA device: run the gpu profile on a host "
                                  "with an NVIDIA GPU and a CUDA build of torch")
    return skip


def provenance(ctx: Any) -> dict[str, Any]:
    """Where this run's GPT-2 weights came from (the manifest's `weights`), for a child process to build the same."""
    from lab.step.model import resolve_weights

    weights = (ctx.results.manifest or {}).get("weights") if ctx.results is not None else None
    return dict(weights) if weights else resolve_weights(ctx.profile.model, None)


needs_cuda = methods.needs_cuda


@dataclass
class Measured:
    """What measure_methods found for one shape: median ms per method (no readback unless asked), the per-round
    samples behind it (for a speedup's interval against figures timed elsewhere), and eager's tokens."""

    ms: dict[str, float] = field(default_factory=dict)
    rounds: dict[str, list[list[float]]] = field(default_factory=dict)
    tokens: torch.Tensor | None = None


def measure_methods(ctx: Any, w: Weights, names: tuple[str, ...], params: dict[str, Any], *, batch: int,
                    max_len: int, prompt_len: int, steps: int, rounds: int, warmup: int, budget: Budget | None = None,
                    dynamic: bool | None = False, readback: bool = False, bandwidth: float | None = None,
                    w32: Weights | None = None, trace: bool = True, profile_kernels: bool = True) -> Measured:
    """Build, check, time and then profile each method at one shape (lab.experiments.common.methods, the lab's
    one way); record under `params` every metric of these that the experiment's catalogue entry declares.
    `w32`: the fp32 weights of the same shape, for the teacher-forced correctness rule (default: `w` in fp32)."""
    dtype = "float32" if w.wte.dtype == torch.float32 else str(w.wte.dtype).removeprefix("torch.")
    shape = methods.Shape(batch, dtype, prompt_len, steps, max_len, dict(params))
    profiler_guard.unit_started(shape.label())  # each shape is timed, then profiled
    prompt = prompt_for(int(w.wte.shape[0]), batch, prompt_len, ctx.device, 7000 + batch)
    ms = methods.build(ctx, w, names, prompt, shape, warmup=warmup, dynamic=dynamic, budget=budget, trace=trace)
    if not ms.built:
        return Measured()
    methods.check(ctx, ms, w32=w32 if w32 is not None else (w if dtype == "float32" else None))
    methods.time(ctx, ms, rounds, readbacks=(readback,), bandwidth_gbps=bandwidth)
    if profile_kernels:
        methods.profile(ctx, ms)
    out = Measured(ms.step_ms(readback), {n: r for (n, rb), r in ms.rounds.items() if rb == readback}, ms.tokens)
    ms.built.clear()
    free_device_memory(ctx.device)
    return out
