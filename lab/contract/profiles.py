"""Profiles: every knob of a run and its default, in one place.

- `smoke`: a tiny GPT-2-shaped model on the CPU, for tests and CI (whole run in a few minutes on 2 cores).
- `cpu`:   GPT-2 124M on the CPU.
- `gpu`:   the GPU lab (GPT-2 124M on CUDA, batches 1 and 64); one run of under 5 minutes on an H200 (the
           budget note above its entry says where the time goes).
- `gpu-full`: `gpu` plus what does not fit its budget: max-autotune, coordinate-descent tuning, batch 16,
           every method at every batch (with Dynamo's automatic dynamic shapes, so the two runs side by side record
           what `dynamic=False` changes), the token read back at every batch, compile time against depth
           2 and 12 and the small MLP (718 s of lab time on an H200, 2026-12-03, with the tuned compiles at batch 1;
           about 1,030 s with compile_tuning, 451 s alone; README, "Profiles and their budget").

Experiment-specific knobs are declared by each experiment (`Options` in lab/experiments/<id>.py, with
their defaults and help: `python -m lab list --options`); a profile overrides them by name in
`options[experiment_id]`, checked against those declarations before a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from lab.contract.catalogue import CATALOGUE
from lab.contract.names import Experiment, Method


@dataclass(frozen=True)
class ModelSpec:
    """A GPT-2-shaped model; the fields map onto transformers.GPT2Config."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int = 50257
    n_positions: int = 1024
    # Random weights at GPT-2's default init (std 0.02) with tied embeddings make greedy decoding
    # repeat the input token; a larger std makes the argmax depend on context, so equality tests
    # compare sequences with many distinct tokens. Too large a std makes activations grow until fp32
    # rounding flips near-tied argmaxes: on an H200, GPT-2 124M at std 0.3 agreed with fp64 on only
    # 95.6% of 2,560 greedy tokens (median logit error 0.06), at std 0.1 on all of them (error 1e-4,
    # 21 distinct tokens of 41); at 0.05 only 5 distinct tokens remained.
    init_std: float = 0.1
    seed: int = 0


TINY = ModelSpec("gpt2-tiny", n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128, init_std=0.3)
GPT2 = ModelSpec("gpt2-124M", n_layer=12, n_embd=768, n_head=12)

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
GPT2_SIZES: dict[str, ModelSpec] = {name: spec for name, spec in SHAPES.items() if name.startswith("gpt2-")}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    device: str  # "cpu" or "cuda"
    model: ModelSpec
    dtype: str = "float32"
    prompt_len: int = 16  # tokens in each prompt
    decode_steps: int = 128  # decode steps timed per round
    max_len: int = 256  # slots in the fixed-shape cache
    batches: tuple[int, ...] = (1,)
    rounds: int = 5  # rounds, methods in rotating order
    warmup: int = 3  # untimed calls before timing (lazy init, allocator, autotuning)
    threads: int | None = None  # torch.set_num_threads on the CPU; None keeps torch's default
    experiments: tuple[str, ...] | None = None  # None: the whole catalogue (less the sweeps unless `sweeps`)
    sweeps: bool = False  # with experiments=None: also run the sweep experiments (lab.contract.catalogue, issue 14)
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def with_options(self, experiment: str, **values: Any) -> "Profile":
        merged = {k: dict(v) for k, v in self.options.items()}
        merged.setdefault(experiment, {}).update(values)
        return replace(self, options=MappingProxyType(merged))

    def params(self) -> dict[str, Any]:
        """The profile as plain JSON-able data, for the results file."""
        return {
            "name": self.name, "device": self.device, "model": self.model.__dict__.copy(), "dtype": self.dtype,
            "prompt_len": self.prompt_len, "decode_steps": self.decode_steps, "max_len": self.max_len,
            "batches": list(self.batches), "rounds": self.rounds, "warmup": self.warmup, "threads": self.threads,
            "options": {k: dict(v) for k, v in self.options.items()}, "sweeps": self.sweeps,
        }


def _frozen(options: dict[str, dict[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    return MappingProxyType({k: MappingProxyType(v) for k, v in options.items()})


# cuda_graph_decode's methods in the gpu profiles (lab.contract.names imports only the standard library, so this
# module stays importable without torch). Batch 1 is the headline: every method there; the batch
# sweep keeps the four families and the fused step's three variants (each takes the projection path
# lab.step.fused.rule gives at that batch); bf16 runs at batch 1.
M = Method  # short, for the tables below
GPU_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.REDUCE_OVERHEAD, M.COMPILE_GRAPH, M.FUSED, M.FUSED_PDL,
               M.FUSED_PDL_PREFETCH)
# (Inductor's two levers on compile+graph, combo kernels and PDL, cost the gpu profile 15-18 s of compiles on an
# H200, 2026-12-02: gpu-full runs them, with every other method of cuda_graph_decode's default list)
GPU_SWEEP_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.COMPILE_GRAPH, M.FUSED, M.FUSED_PDL, M.FUSED_PDL_PREFETCH)
GPU_BF16_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.COMPILE_GRAPH, M.FUSED, M.FUSED_PDL, M.FUSED_PDL_PREFETCH)
# gpu-full: every method at batch 1 (its default list, plus max-autotune), all but the minutes-long
# compiles at every batch, the Inductor levers in bf16 too
FULL_SWEEP_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.REDUCE_OVERHEAD, M.REDUCE_OVERHEAD_STATIC,
                      M.COMPILE_GRAPH, M.COMPILE_GRAPH_COMBO, M.COMPILE_GRAPH_PDL, M.FUSED, M.FUSED_PDL,
                      M.FUSED_PDL_PREFETCH)
FULL_BF16_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.COMPILE_GRAPH, M.COMPILE_GRAPH_COMBO, M.COMPILE_GRAPH_PDL,
                     M.FUSED, M.FUSED_PDL, M.FUSED_PDL_PREFETCH)
# gpu-full's first batch: every method but the tuned compiles (coordinate descent, max-autotune), which
# compile_tuning times at every batch beside compile+graph. With them at batch 1 only, cuda_graph_decode took 444 s
# on an H200 (2026-12-03); at every batch it would pass the 10 minutes some hosts give one command.
FULL_METHODS = (M.EAGER, M.GRAPH, M.COMPILE_DEFAULT, M.REDUCE_OVERHEAD, M.REDUCE_OVERHEAD_STATIC, M.COMPILE_GRAPH,
                M.COMPILE_GRAPH_COMBO, M.COMPILE_GRAPH_PDL, M.FUSED, M.FUSED_PDL, M.FUSED_PDL_PREFETCH)


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        description="tiny GPT-2-shaped model on the CPU, for tests and CI",
        device="cpu", model=TINY, prompt_len=8, decode_steps=24, max_len=64, batches=(1, 4), rounds=3, warmup=2,
        options=_frozen({
            "recompiles": {"batch_sizes": list(range(1, 13))},
            "decode_recompiles": {"calls": 20},
            "fixed_step_equivalence": {"steps": 24},
            # overheads (tiny sizes: compile time dominates; together well under a minute once warm)
            "graph_break_repair": {"rows": 2, "dim": 16, "iters": 20},
            "fusion": {"n_ops": [1, 4], "cache_bytes": 64 * 1024, "memory_bytes": 4 << 20, "rounds": 2,
                       "iters_cache": 10, "iters_memory": 3},
            "launch_overhead": {"n_ops": 40, "iters": 20},
            "allocation": {"k": 32, "numel": 256, "iters": 20},
            "gemm_bound": {"batch": 128, "dim": 256, "layers": 1, "iters": 3, "rounds": 2},
            "amdahl": {"block_batch": 2, "block_seq": 16, "iters": 5, "rounds": 2, "compile_decode": False,
                       "compile_block": False},
            "diagnose": {"rounds": 2, "iters": 5},
            "toolchain": {"try_compile": True},
            "inductor": {"steps": 15, "equiv_steps": 15, "steps_per_round": 8, "rounds": 3, "warmup": 2},
            "compile_cost": {"mlp_trials": 1, "depths": [2], "rounds": 3, "steady_steps": 10,
                             "reuse_probe": False, "child_timeout_s": 300},
        }),
    ),
    "cpu": Profile(
        name="cpu",
        description="GPT-2 124M on the CPU",
        device="cpu", model=GPT2, prompt_len=16, decode_steps=32, max_len=256, batches=(1, 4), rounds=5,
        options=_frozen({
            "recompiles": {"batch_sizes": list(range(1, 13))},
            "decode_recompiles": {"calls": 20},
            "fixed_step_equivalence": {"steps": 40},
            # overheads: caches here are L2 1 MiB/core, L3 8 MiB -> 256 KiB inside, 64 MiB outside
            "graph_break_repair": {"rows": 2, "dim": 16, "iters": 50},
            "fusion": {"n_ops": [1, 2, 3, 4, 5, 6, 7, 8], "cache_bytes": 256 * 1024, "memory_bytes": 64 << 20,
                       "rounds": 3, "iters_cache": 20, "iters_memory": 3},
            "launch_overhead": {"n_ops": 100, "iters": 30},
            "allocation": {"k": 64, "numel": 256, "iters": 30},
            "gemm_bound": {"batch": 256, "dim": 512, "layers": 2, "iters": 3, "rounds": 3},
            "amdahl": {"decode_layers": 2, "block_batch": 2, "block_seq": 64, "iters": 5, "rounds": 3},
            "diagnose": {"rounds": 3, "iters": 10},
            "toolchain": {"try_compile": True},
            "inductor": {"steps": 40, "equiv_steps": 15, "steps_per_round": 10, "rounds": 6, "warmup": 3},
            "compile_cost": {"mlp_trials": 3, "depths": [2, 6, 12], "rounds": 5, "steady_steps": 10,
                             "reuse_probe": True, "child_timeout_s": 900},
        }),
    ),
    # The gpu profile's budget: at most 5 minutes of lab time on an H200. Measured there on 2026-12-02 (the offline
    # route, a fresh host with a cold Inductor cache; each run's notes say where the time went:
    # cuda_graph_decode.phase_s, compile_cost.child_s): 351 s with batches 1, 8 and 64 — sentinel 36 and sentinel_end
    # 36 (a fresh process each; of which 12.4 s building GPT-2 on the CPU, 0.04 s on the GPU, and a 12 s warm-up
    # that ran out on a host whose speed moved 1.6-1.8x), decode_recompiles 18, cuda_graph_decode 145 (batch 8: 19 s
    # to build, 8 s to check and time), graph_hazards 21, inductor 15, compile_cost 44, the rest 36. So since then
    # the model is generated on the run's device (lab.step.model.build_model), the sentinels' warm-up is at least 6 s
    # within 8 s (the slow starts seen on H200 hosts lasted up to about 3 s: four rounds of 128 steps), a child
    # ends without native teardown (lab.run.childproc), and batch 8 moved to gpu-full (which runs 1, 8, 16, 64):
    # measured the same day on another H200 host, 230.8 s (about 285 s on the first host, by its phase times;
    # README, "Profiles and their budget").
    "gpu": Profile(
        name="gpu",
        description="the GPU lab: GPT-2 124M on CUDA, batches 1 and 64, the step methods at batch 1 "
                    "(under 5 min on an H200)",
        device="cuda", model=GPT2, prompt_len=16, decode_steps=128, max_len=256, batches=(1, 64), rounds=5,
        options=_frozen({
            # the fresh processes' warm-up: twice the longest slow start seen, within a budget (see above)
            "sentinel": {"warmup_s": 6.0, "budget_s": 8.0},
            "sentinel_end": {"warmup_s": 6.0, "budget_s": 8.0},
            "recompiles": {"batch_sizes": list(range(1, 13))},
            # 10 calls show the growing step's recompiles as 20 do (Dynamo's limit stops them sooner): 25 s -> ~12
            "decode_recompiles": {"calls": 10},
            "fixed_step_equivalence": {"steps": 40},
            # overheads: ~90 s together, compiles included. L2 is 50 MB: 4 MiB inside, 1 GiB far outside
            "graph_break_repair": {"rows": 64, "dim": 4096, "iters": 100},
            "manual_graph_recipe": {"warmup": 10, "iters": 200},
            "fusion": {"n_ops": [1, 2, 4, 8], "cache_bytes": 4 << 20, "memory_bytes": 1 << 30, "rounds": 3,
                       "iters_cache": 50, "iters_memory": 10},
            "launch_overhead": {"n_ops": 200, "iters": 50},
            "allocation": {"k": 64, "numel": 256, "iters": 50},
            "gemm_bound": {"batch": 8192, "dim": 4096, "layers": 2, "dtype": "bfloat16", "iters": 10, "rounds": 3},
            "amdahl": {"block_batch": 32, "block_seq": 256, "iters": 20, "rounds": 3},
            "diagnose": {"rounds": 3, "iters": 20},
            "toolchain": {"try_compile": True},
            "inductor": {"steps": 40, "equiv_steps": 15, "steps_per_round": 32, "rounds": 5, "warmup": 3},
            "compile_cost": {"mlp_trials": 0, "depths": [12], "rounds": 5, "steady_steps": 32,
                             "reuse_probe": False, "child_timeout_s": 300},
            "cuda_graph_decode": {
                "methods": list(GPU_METHODS), "sweep_methods": list(GPU_SWEEP_METHODS),
                "bf16_methods": list(GPU_BF16_METHODS), "readback_batches": [1], "sweep_rounds": 3,
                # one static graph per batch: under automatic dynamic shapes batch 8 recompiles every method
                # with a symbolic batch (16-19 s each); static compiles cost about as much in all and match
                # what a server with fixed batch buckets runs (gpu-full keeps Dynamo's default)
                "dynamic": False},
        }),
    ),
}
PROFILES["gpu-full"] = replace(
    PROFILES["gpu"], name="gpu-full", batches=(1, 8, 16, 64),
    # the default catalogue and compile_tuning (by name only), in catalogue order
    experiments=tuple(s.id for s in CATALOGUE if (not s.sweep and not s.by_name) or s.id == Experiment.COMPILE_TUNING),
    description="gpu plus max-autotune, coordinate descent, every method at every batch, compile cost vs depth "
                "(about 17 min of lab time on an H200)",
    options=_frozen({**{k: dict(v) for k, v in PROFILES["gpu"].options.items()},
                     "compile_cost": {"mlp_trials": 1, "depths": [2, 12], "rounds": 5, "steady_steps": 32,
                                      "reuse_probe": False, "child_timeout_s": 600},
                     "decode_recompiles": {"calls": 20},
                     "cuda_graph_decode": {"methods": list(FULL_METHODS), "sweep_methods": list(FULL_SWEEP_METHODS),
                                           "bf16_methods": list(FULL_BF16_METHODS)},
                     Experiment.COMPILE_TUNING: {}}))


# ---------------------------------------------------------------------------- the sweeps (issue 14)
SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")

# Small CPU versions for the smoke profile: every code path that does not need CUDA, in about a minute once
# Inductor's cache is warm (each CPU compile of the tiny model costs 10-30 s cold, so a handful of them).
SMOKE_SWEEPS: dict[str, dict[str, Any]] = {
    "peer_generate": {"variants": ["dynamic", "static"], "isolated": ["static"], "batches": [1, 2], "new_tokens": 8,
                      "rounds": 2, "warmup_calls": 1, "child_timeout_s": 300.0},
    "model_scaling": {"sizes": ["tiny-2L", "tiny-4L"], "dtypes": ["float32", "bfloat16"], "batches": [1, 2],
                      "methods": [M.EAGER, M.GRAPH, M.COMPILE_DEFAULT], "steps": 8, "rounds": 2, "max_compiles": 1},
    "context_scaling": {"max_lens": [32, 64, 160], "batches": [2], "fills": [0.25, 0.75], "headline_fill": 0.75,
                        "fixed_method": M.EAGER, "growing": [M.EAGER], "steps": 8, "rounds": 2},
    "graph_buckets": {"max_batch": 8, "steps": 4, "rounds": 2, "check_sizes": [3, 5]},
    "data_dependent_branch": {"batches": [2], "steps": 12, "rounds": 2, "check_every": 4, "compile_host_check": False},
}
PROFILES["smoke"] = replace(PROFILES["smoke"], sweeps=True,
                            options=_frozen({**{k: dict(v) for k, v in PROFILES["smoke"].options.items()},
                                             **SMOKE_SWEEPS}))

# gpu-sweep: the five sweeps on an H200 in one run of about 7 minutes (estimates from the gpu reference: a
# GPT-2 124M step compiles in 4-16 s, +0.5-1 s per layer cold; transformers' compiled generate in its own
# child). The heavy knobs are options: `--set model_scaling.budget_s=600 --only model_scaling` measures every
# compile of the scaling sweep in one run of its own (about 6 minutes).
PROFILES["gpu-sweep"] = Profile(
    name="gpu-sweep",
    description="the sweeps on CUDA: model size, context length, batch buckets, an EOS branch, transformers' generate",
    device="cuda", model=GPT2, prompt_len=16, decode_steps=32, max_len=256, batches=(1, 8), rounds=3,
    experiments=("sentinel", *SWEEPS, "sentinel_end"),
    options=_frozen({
        "peer_generate": {"batches": [1, 8], "new_tokens": 48, "rounds": 3, "warmup_calls": 2, "child_timeout_s": 300.0},
        "model_scaling": {"sizes": ["gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B"],
                          "dtypes": ["float32", "bfloat16"], "batches": [1, 8], "steps": 24, "rounds": 3,
                          "budget_s": 120.0,
                          # the fused variants are not compiles, so budget_s does not cap them: 4 sizes x 2
                          # dtypes x 2 batches x 3 variants, each a 1-3 s build (Triton compiles per shape
                          # and path) and a second of timing: ~2-4 minutes on top (estimated)
                          "methods": [Method.EAGER, Method.GRAPH, Method.COMPILE_GRAPH, Method.FUSED,
                                      Method.FUSED_PDL, Method.FUSED_PDL_PREFETCH]},
        "context_scaling": {"max_lens": [256, 512, 1024, 2048], "batches": [1, 16], "fills": [0.1, 0.5, 0.9],
                            "steps": 24, "rounds": 3},
        "graph_buckets": {"max_batch": 64, "steps": 16, "rounds": 3},
        "data_dependent_branch": {"batches": [1], "steps": 32, "rounds": 3},
    }),
)


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r} (choose from {', '.join(PROFILES)})") from None
