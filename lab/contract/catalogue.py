"""The experiment catalogue: every id the lab knows, what it measures, what it needs and what it records.

An experiment's code lives in `lab/experiments/<id>.py`: a frozen dataclass `Options` (its knobs,
`lab.contract.options`) and a function `run(ctx)`. The ids are the ones of the lab book
(`shared/LAB_BOOK.md`); they are stable because issues, reports and comparisons refer to them.
Each entry lists the metrics its experiment records (declared in `lab.contract.metrics`): recording any
other is an error, and the report's use of a metric is checked against these lists.

Needs are checked by the runner before an experiment starts (`Toolchain.reason_for`):
- `cuda`: a CUDA device is visible to torch.
- `inductor`: Inductor's backend for the run's device works here (a C++ compiler and the Python
  headers on the CPU, Triton on CUDA).
- `cxx`: a C++ compiler and the Python headers, whatever the device.
- `triton`: Triton is importable.
- `host`: runs on the host whatever the profile's device (it measures no device).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.contract import metrics as M
from lab.contract.metrics import MetricSpec


@dataclass(frozen=True)
class ExperimentSpec:
    id: str
    title: str
    source: str  # which text of the lab book it comes from
    needs: tuple[str, ...] = ()
    metrics: tuple[MetricSpec, ...] = ()  # every metric it may record
    workload: str = ""  # what its step_ms methods run, for `selection` to choose among them (empty: not a workload)
    sweep: bool = False  # a sweep (issue 14): run by profiles that ask for sweeps, or by name, not by default
    by_name: bool = False  # a planned device measurement: run only when named (--only, a profile's list), never by default

    @property
    def module(self) -> str:
        """Where its code lives, as data: lab.run loads it (lab.run.context.experiment_module), the contract never."""
        return f"lab.experiments.{self.id}"


_CORRECTNESS = (M.TOKENS_EQUAL, M.TOKEN_AGREEMENT, M.MAX_LOGIT_DIFF)
_INTERVAL = (M.SPEEDUP_CI_LOW, M.SPEEDUP_CI_HIGH)
_TIMED = (M.SETUP_S, M.STEP_MS, M.SPEEDUP, *_INTERVAL)
# The host-speed index beside a step method's timing and what it says (lab.contract.hostspeed)
_HOST = (M.HOST_INDEX_MS, M.HOST_INDEX_COST, M.HOST_INDEX_REFERENCE_MS, M.HOST_SENSITIVITY, M.HOST_SENSITIVITY_CI_LOW,
         M.HOST_SENSITIVITY_CI_HIGH, M.STEP_MS_AT_REFERENCE, M.STEP_MS_AT_REFERENCE_CI_LOW,
         M.STEP_MS_AT_REFERENCE_CI_HIGH, M.SPEEDUP_AT_REFERENCE, M.SPEEDUP_AT_REFERENCE_CI_LOW,
         M.SPEEDUP_AT_REFERENCE_CI_HIGH)
_SENSITIVITY = (M.HOST_SENSITIVITY, M.HOST_SENSITIVITY_CI_LOW, M.HOST_SENSITIVITY_CI_HIGH)  # the fresh process's
_PAIRED = (M.IN_RUN_OVER_FRESH, M.IN_RUN_OVER_FRESH_CI_LOW, M.IN_RUN_OVER_FRESH_CI_HIGH, M.FRESH_OVER_FRESH,
           M.FRESH_OVER_FRESH_CI_LOW, M.FRESH_OVER_FRESH_CI_HIGH)  # the run's own eager and fresh ones, taking turns

# What cuda_graph_decode's measurement of step methods records (lab.experiments.common.methods), for the experiments
# that run it
_STEP_METHODS = (M.SETUP_S, M.DYNAMO_GRAPHS, M.GRAPH_BREAKS, M.COMPILED_FRAMES, M.CUDAGRAPH_SKIPS, *_CORRECTNESS,
                 M.CORRECT, M.TEACHER_FORCED_AGREEMENT, M.TEACHER_FORCED_MAX_LOGIT_ERROR, M.KERNELS_PER_STEP,
                 M.KERNEL_TIME_PER_STEP_US, M.GPU_BUSY_US, M.GAP_US, M.RECOMPILES_DURING_TIMING, M.STEP_MS,
                 M.ROUND_MEDIANS_MS, M.SPEEDUP_VS_EAGER, *_INTERVAL, M.SAVING_MS_PER_STEP, M.BREAK_EVEN_STEPS, M.MBU,
                 M.MBU_CI_LOW, M.MBU_CI_HIGH, M.BANDWIDTH_GBPS, *_HOST)

CATALOGUE: tuple[ExperimentSpec, ...] = (
    # first: the decode step in a fresh process, before the run has measured (or profiled) anything
    ExperimentSpec("sentinel", "Eager and graph replay at batch 1 in a fresh process: the run's clean baseline", "020",
                   ("cuda",), (M.SENTINEL_STEP_MS, M.LAUNCH_US_PER_OP_SAMPLES, M.LAUNCH_US_PER_OP, *_SENSITIVITY,
                               *_PAIRED)),
    # chapter 000: the core of the lab
    ExperimentSpec("toolchain", "Which C++ compiler Inductor would use, Python headers, Triton, MSVC", "000", ("host",),
                   (M.CXX_COMPILER_FOUND, M.CXX_OFF_PATH, M.PYTHON_HEADERS, M.TRITON_IMPORTABLE, M.CUDA_AVAILABLE,
                    M.INDUCTOR_BACKEND_USABLE, M.PYTHON_EXTENSION_COMPILES)),
    ExperimentSpec("graph_breaks", "Dynamo explain on toy functions that break: graphs, breaks, reasons", "000", (),
                   (M.GRAPHS, M.GRAPH_BREAKS, M.OPS)),
    ExperimentSpec("recompiles", "12 batch sizes under dynamic=False, automatic and True: compiles, limit hit", "000",
                   (), (M.RECOMPILE_LIMIT, M.COMPILES, M.GRAPHS, M.SYMBOLIC_GRAPHS, M.LIMIT_HIT)),
    ExperimentSpec("decode_recompiles", "Growing-cache step vs fixed-shape step, 20 calls: compiles, graphs, nodes",
                   "000", (), (M.COMPILES, M.GRAPHS, M.LIMIT_HIT, M.OP_NODES_FIRST_GRAPH, M.SYMBOLIC_GRAPHS,
                               M.GRAPH_BREAKS, M.EXPLAIN_OPS)),
    ExperimentSpec("fixed_step_equivalence", "Fixed-shape greedy decoding equals the reference, token for token", "000",
                   (), (M.DISTINCT_TOKENS_MIN, M.TOKENS_EQUAL, M.GARBAGE_SCALE)),
    ExperimentSpec("cuda_graph_decode", "Decode step: eager vs graph replay vs compile modes, per batch", "000",
                   ("cuda",), _STEP_METHODS, workload="GPT-2 fixed-shape decode step"),
    # by name (the gpu-full profile names it): cuda_graph_decode's measurement of the tuned compiles alone, so that
    # each fits a host's 10-minute command (issue 33)
    ExperimentSpec("compile_tuning", "Max-autotune and coordinate descent at every batch, beside compile+graph: "
                   "compile time, step", "000", ("cuda",), _STEP_METHODS, by_name=True),
    ExperimentSpec("graph_cost", "Warm-up + capture time, break-even steps, state and graph-pool memory", "000",
                   ("cuda",), (M.CAPTURE_S, M.WARMUP_S, M.CAPTURE_ONLY_S, M.STATE_MIB, M.STATE_ALLOCATED_MIB,
                               M.GRAPH_POOL_MIB, M.WEIGHTS_MIB, M.STEP_MS, M.SAVING_MS_PER_STEP, M.BREAK_EVEN_STEPS)),
    ExperimentSpec("graph_hazards", "Replaced input buffer (silent) and replay past the cache end (fatal)", "000",
                   ("cuda",), (M.REPLACED_INPUT_TOKENS_EQUAL_UNTOUCHED, M.COPIED_INPUT_CHANGES_TOKENS, M.CHILD_DIED,
                               M.CHILD_EXIT_CODE, M.DEVICE_ASSERT_SEEN, M.EAGER_CPU_EXCEPTION_CAUGHT, M.GUARD_RAISED,
                               M.GUARD_REPLAYS_BEFORE_ERROR)),
    ExperimentSpec("ceilings", "Launch, bandwidth and compute ceilings of this host; which bound binds", "000", (),
                   (M.LAUNCH_US_PER_OP_SAMPLES, M.LAUNCH_US_PER_OP, M.BANDWIDTH_GBPS_SAMPLES, M.BANDWIDTH_GBPS,
                    M.MATMUL_TFLOPS_SAMPLES, M.MATMUL_TFLOPS, M.STEP_MS, M.KERNELS_PER_STEP, M.LAUNCH_COST_BASIS,
                    M.BYTES_PER_STEP, M.FLOPS_PER_STEP, M.BOUND_LAUNCH_MS, M.BOUND_BANDWIDTH_MS, M.BOUND_COMPUTE_MS,
                    M.BOUND_MS, M.BINDING, M.MEASURED_MS, M.MEASURED_OVER_BOUND, M.ACHIEVED_GBPS, M.MBU)),
    ExperimentSpec("inductor", "Inductor on the indexed and the split decode step: speed, logits, tokens", "000",
                   ("inductor",), (*_CORRECTNESS, M.MAX_LOGIT_REL_DIFF, M.DYNAMO_GRAPHS, M.GRAPH_BREAKS,
                                   M.STEP_COMPILES, M.OP_COMPILES, M.SETUP_S, M.STEP_MS, M.SPEEDUP_VS_EAGER,
                                   *_INTERVAL, *_HOST)),
    ExperimentSpec("compile_cost", "First-call compile cold vs warm cache, fresh processes; break-even calls", "000",
                   ("inductor",), (M.FIRST_CALL_S, M.STEADY_MS, M.SAVING_MS_PER_CALL, M.BREAK_EVEN_CALLS,
                                   M.CACHE_REUSED)),
    # chapter 002
    ExperimentSpec("graph_break_repair", "RMS-norm with .item()/if/print vs torch.where: breaks, equality, speed",
                   "002", (), (M.GRAPHS, M.GRAPH_BREAKS, M.SETUP_S, M.STEP_MS, M.SPEEDUP_VS_BROKEN_EAGER,
                               *_INTERVAL),
                   workload="RMS-norm step, broken vs repaired"),
    ExperimentSpec("manual_graph_recipe", "Linear(256,256) captured by hand with static buffers; equal to eager",
                   "002", ("cuda",), (M.CAPTURE_S, M.STEP_MS, M.SPEEDUP, *_INTERVAL), workload="Linear(256,256) captured by hand"),
    # module 003
    ExperimentSpec("fusion", "Chain of N elementwise ops, in and out of cache: eager vs compiled, bytes", "003",
                   ("inductor",), (*_TIMED, M.KERNELS, M.BYTES_MOVED, M.ACHIEVED_GBPS, M.CEILING_X),
                   workload="chain of N elementwise ops"),
    ExperimentSpec("launch_overhead", "Many tiny ops at batch 1: eager vs graph vs compile, per-op cost", "003", (),
                   (*_TIMED, M.OPS_PER_STEP, M.US_PER_OP, M.US_PER_OP_REMOVED), workload="many tiny ops at batch 1"),
    ExperimentSpec("allocation", "Allocator cost per intermediate tensor, and what planning removes", "003", (),
                   (M.SETUP_S, M.STEP_MS, M.ALLOCATIONS_PER_STEP, M.US_PER_INTERMEDIATE, M.EMPTY_MS,
                    M.US_PER_EMPTY), workload="K intermediates: allocation vs planning"),
    ExperimentSpec("gemm_bound", "Large-batch GEMM-dominated model: compile gives about 1.0x", "003", ("inductor",),
                   (*_TIMED, M.KERNELS, M.GEMM_SHARE, M.ACHIEVED_TFLOPS), workload="large-batch GEMM-dominated MLP"),
    ExperimentSpec("amdahl", "Fusible fraction from a profile: predicted vs measured compile speedup", "003",
                   ("inductor",), (M.FUSIBLE_FRACTION, M.MATMUL_SHARE, M.KERNELS, M.K, M.PREDICTED_SPEEDUP,
                                   M.SETUP_S, M.STEP_MS, M.MEASURED_SPEEDUP, M.MEASURED_OVER_PREDICTED,
                                   M.LAUNCH_US_PER_OP, M.KERNEL_TIME_PER_STEP_US, M.PREDICTED_SPEEDUP_LAUNCH,
                                   M.MEASURED_OVER_PREDICTED_LAUNCH, *_INTERVAL),
                   workload="decode step and transformer block (Amdahl)"),
    ExperimentSpec("diagnose", "The five checks on example targets: launch, kernels, breaks, recompiles, steady", "003",
                   (), (M.VERDICT, M.STEP_MS, M.SPEEDUP, *_INTERVAL, M.KERNELS, M.MATMUL_SHARE, M.GRAPH_BREAKS, M.RECOMPILES,
                        M.HOST_SHARE)),
    # last: it reads the records above
    ExperimentSpec("selection", "Which of eager / compile / graph / compile+graph wins each workload", "002", ("host",),
                   (M.WINNER, M.WINNER_FAMILY, M.SPEEDUP_VS_EAGER, *_INTERVAL, M.MARGIN_VS_RUNNER_UP,
                    M.TIE_WITH_EAGER, M.CASES)),
    # sweeps (issue 14): the questions users bring next; run by the gpu-sweep and smoke profiles, or by name
    ExperimentSpec("peer_generate", "transformers' generate (dynamic, static, static + compile) vs the lab's step, same "
                   "weights", "014", (), (M.OUTCOME, M.FIRST_CALL_S, M.SETUP_S, M.STEP_MS, M.TOKENS_EQUAL,
                                          M.TOKEN_AGREEMENT, M.MAX_LOGIT_DIFF, M.CORRECT, M.SPEEDUP_VS_EAGER,
                                          *_INTERVAL, M.SPEEDUP_VS_PEER, M.CONCLUSION, *_HOST), sweep=True),
    ExperimentSpec("model_scaling", "GPT-2 124M to 1.5B shapes, fp32 and bf16: does the graph gain shrink as the model "
                   "grows?", "014", (), (M.WEIGHTS_MIB, M.BANDWIDTH_GBPS, M.SETUP_S, *_CORRECTNESS, M.CORRECT,
                                         M.TEACHER_FORCED_AGREEMENT, M.TEACHER_FORCED_MAX_LOGIT_ERROR, M.STEP_MS,
                                         M.SPEEDUP_VS_EAGER, *_INTERVAL, M.SAVING_MS_PER_STEP, M.KERNELS_PER_STEP,
                                         M.KERNEL_TIME_PER_STEP_US, M.FLOPS_PER_STEP, M.FLOPS_PER_KERNEL,
                                         M.BYTES_PER_STEP, M.MBU, M.MBU_CI_LOW, M.MBU_CI_HIGH, M.GAIN_RATIO,
                                         M.CONCLUSION, *_HOST),
                   sweep=True),
    ExperimentSpec("context_scaling", "Fixed-shape step + graph vs growing-cache step, max_len 256-2048, filled 10-90%: "
                   "the crossover", "014", (), (M.SETUP_S, M.STEP_MS, M.TOKENS_EQUAL, M.CROSSOVER_MAX_LEN,
                                                M.CONCLUSION), sweep=True),
    ExperimentSpec("graph_buckets", "Bucket ladders (per size, powers of two, vLLM's): capture, memory, padding waste",
                   "014", (), (M.STATE_MIB, M.STEP_MS, M.BUCKET_GRAPHS, M.CAPTURE_S, M.GRAPH_POOL_MIB, M.TOKENS_EQUAL,
                               M.TOKEN_AGREEMENT, M.WASTE_FRACTION, M.EXPECTED_STEP_MS, M.TIME_MEMORY_SCORE,
                               M.CONCLUSION), sweep=True),
    ExperimentSpec("data_dependent_branch", "An end-of-sequence check in the step: Dynamo's break, capture's error, the "
                   "torch.where rewrite", "014", (), (M.GRAPHS, M.GRAPH_BREAKS, M.STEP_COMPILES, M.DYNAMO_GRAPHS,
                                                       M.CAPTURES, M.SETUP_S, M.STEP_MS, M.SPEEDUP_VS_EAGER,
                                                       *_INTERVAL, M.TOKENS_EQUAL, M.STOPPED_AT_STEP, M.CONCLUSION), sweep=True),
    # by name only (`--only fused_anatomy`): one planned device call of issue 31
    ExperimentSpec("fused_anatomy", "Where a fused-step kernel's time goes: each kernel timed with one stage left out "
                   "(launch, ramp, weights, input, arithmetic, store, the PDL wait), then the whole step with every launch, or "
                   "one kernel's, in one variant", "031", ("cuda", "triton"),
                   (M.BANDWIDTH_GBPS, M.ANATOMY_US, M.STAGE_US, M.STAGE_US_CI_LOW, M.STAGE_US_CI_HIGH,
                    M.ANATOMY_STEP_US), by_name=True),
    # by name only (`--only fused_persistent`): issue 31's persistent layer kernel, in a child process with a watchdog
    ExperimentSpec("fused_persistent", "The fused step with one persistent kernel a layer (a grid barrier between its "
                   "phases) beside the five-kernel step", "031", ("cuda", "triton"),
                   (M.BANDWIDTH_GBPS, M.PERSISTENT_PROGRAMS, M.MAX_LOGIT_DIFF, M.STEP_MS, M.MBU, M.BYTES_PER_STEP,
                    M.SPEEDUP_VS_FUSED, M.SPEEDUP_VS_FUSED_CI_LOW, M.SPEEDUP_VS_FUSED_CI_HIGH), by_name=True),
    # last: the fresh-process step again, and the run's own baseline judged against it
    ExperimentSpec("sentinel_end", "The fresh-process step at the end, paired with the run's own eager: the instrument's "
                   "verdict, and the host's drift", "020",
                   ("cuda",), (M.SENTINEL_STEP_MS, M.LAUNCH_US_PER_OP_SAMPLES, M.LAUNCH_US_PER_OP, *_SENSITIVITY,
                               M.IN_RUN_OVER_SENTINEL, M.SENTINEL_DRIFT, *_PAIRED, M.IN_RUN_CHANGE,
                               M.IN_RUN_CHANGE_CI_LOW, M.IN_RUN_CHANGE_CI_HIGH, M.FRESH_CHANGE, M.FRESH_CHANGE_CI_LOW,
                               M.FRESH_CHANGE_CI_HIGH)),
)

BY_ID: dict[str, ExperimentSpec] = {spec.id: spec for spec in CATALOGUE}


def resolve(ids: list[str] | None, sweeps: bool = True) -> list[ExperimentSpec]:
    """The specs for the given ids, in catalogue order; unknown ids are an error naming them. Without ids: the
    whole catalogue, less the sweeps unless `sweeps` (a profile's `sweeps` flag) and less those run by name only."""
    if not ids:
        return [spec for spec in CATALOGUE if (sweeps or not spec.sweep) and not spec.by_name]
    unknown = [i for i in ids if i not in BY_ID]
    if unknown:
        raise ValueError(f"unknown experiment id(s): {', '.join(unknown)} (valid: {', '.join(BY_ID)})")
    wanted = set(ids)
    return [spec for spec in CATALOGUE if spec.id in wanted]
