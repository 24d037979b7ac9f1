"""What each metric means: its unit, which way is better, and what must match for two values to compare.

Every metric an experiment records is declared here once, as a `MetricSpec`, and the catalogue
entry of each experiment lists the specs it produces (`lab.contract.catalogue`). The recorder refuses an
undeclared metric or a value of the wrong kind, `compare` and the report reason only from these
declarations, and a metric whose direction is `NONE` is never marked better or worse.

`comparable` names what, beyond the metric's own params (which must match exactly for two values
to be paired at all), must be equal for the two values to be compared:
- `"metric:NAME"`: the value of the metric NAME recorded with the same params in the same record
  (e.g. `fusion.step_ms` is comparable only where `bytes_moved` is equal);
- `"manifest:PATH"`: a field of the run's manifest, dotted (e.g. `manifest:compile_cache.state`);
- `"profile:PATH"`: a field of the run's profile (e.g. `profile:model.name`);
- `"option:EXPERIMENT.KEY"`: for values of that experiment only, the option they ran with (e.g.
  gemm_bound's speedup only where `gemm_bound.dtype` is equal).
`lab.contract.marks` evaluates them (and says which one failed).

`derived_from` names the metrics a figure is computed from (mbu and speedup_vs_eager from step_ms,
measured_over_bound from step_ms and bound_ms): the figure is comparable only where its sources
would be, so `conditions(spec)` is its own `comparable` followed by every source's conditions
(transitively), declared once on the source. An `option:` condition applies to the values of its
experiment and to the values *about* that experiment (selection's figures name it in their
`workload` param).

This module imports nothing but the standard library: the report and compare run without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lab.contract import units


class Direction(StrEnum):
    LOWER = "lower"  # lower is better (times, memory, break-even counts)
    HIGHER = "higher"  # higher is better (speedups, bandwidth, agreement)
    NONE = "none"  # neither: a difference is "changed", never better or worse


class Kind(StrEnum):
    NUMBER = "number"  # int or float (or null: not measured)
    BOOL = "bool"
    TEXT = "text"  # a label, e.g. which bound binds
    NUMBERS = "numbers"  # a list of numbers (e.g. per-round medians)


@dataclass(frozen=True)
class MetricSpec:
    """The declaration of one metric name."""

    name: str
    unit: str
    direction: Direction
    help: str
    kind: Kind = Kind.NUMBER
    comparable: tuple[str, ...] = ()
    # The metrics that hold this one's 95% interval, recorded with the same params (low, high): `compare`,
    # the history and every "same / faster / slower" the lab says judge the value by its interval
    # (lab.contract.intervals). A timing's interval is in its spread (ci_low, ci_high) instead.
    interval: tuple[str, str] | None = None
    # The metrics this one is computed from: it inherits their comparability conditions (`conditions`).
    derived_from: tuple[str, ...] = ()

    def __str__(self) -> str:  # so a spec can be used where its name is expected
        return self.name

    def accepts(self, value: Any) -> bool:
        """Whether `value` is of this metric's kind (None is accepted for numbers: not measured)."""
        if self.kind is Kind.BOOL:
            return isinstance(value, bool)
        if self.kind is Kind.TEXT:
            return isinstance(value, str)
        if self.kind is Kind.NUMBERS:
            return isinstance(value, list) and all(is_number(v) for v in value)
        return value is None or is_number(value)


def is_number(value: Any) -> bool:
    """A number: an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


REGISTRY: dict[str, MetricSpec] = {}


def declare(name: str, unit: str, direction: Direction, help: str, kind: Kind = Kind.NUMBER,
            comparable: tuple[str, ...] = (), interval: tuple[str, str] | None = None,
            derived_from: tuple[str, ...] = ()) -> MetricSpec:
    """Declare a metric name once; a second declaration of the same name is a programming error."""
    if name in REGISTRY:
        raise ValueError(f"metric {name!r} is declared twice")
    spec = MetricSpec(name, unit, direction, help, kind, comparable, interval, derived_from)
    REGISTRY[name] = spec
    return spec


def conditions(spec: MetricSpec | None) -> tuple[str, ...]:
    """Every comparability condition of `spec`: its own, then those of what it derives from (transitively, each
    once, in declaration order). A source this lab version does not declare adds nothing."""
    out: list[str] = []
    seen: set[str] = set()
    todo = [spec] if spec is not None else []
    while todo:
        current = todo.pop(0)
        if current.name in seen:
            continue
        seen.add(current.name)
        out += [rule for rule in current.comparable if rule not in out]
        todo += [s for s in (REGISTRY.get(n) for n in current.derived_from) if s is not None]
    return tuple(out)


def spec(name: str) -> MetricSpec | None:
    """The declaration of a metric name, or None for a name this lab version does not declare."""
    return REGISTRY.get(name)


def _with_interval(name: str, unit: str, direction: Direction, help: str, low_note: str = "",
                   comparable: tuple[str, ...] = (), derived_from: tuple[str, ...] = ()) -> tuple[MetricSpec, ...]:
    """A metric and the two that hold its 95% interval (NAME_ci_low, NAME_ci_high, same derivation), in that order;
    `low_note` ends the low end's help (how the interval was drawn)."""
    low, high = f"{name}_ci_low", f"{name}_ci_high"
    return (declare(name, unit, direction, help, comparable=comparable, interval=(low, high),
                    derived_from=derived_from),
            declare(low, unit, N, f"low end of the 95% interval of {name}{low_note}", derived_from=derived_from),
            declare(high, unit, N, f"high end of the 95% interval of {name}", derived_from=derived_from))


L, H, N = Direction.LOWER, Direction.HIGHER, Direction.NONE
NUMBERS, BOOL, TEXT = Kind.NUMBERS, Kind.BOOL, Kind.TEXT

# Compile times depend on whether Inductor's cache already held the kernels: two values compare only
# where the cache was in the same state when the run started (the manifest's compile_cache.state).
_CACHE = ("manifest:compile_cache.state",)
# What a GPT-2 step costs depends on the model's shape (layers, width, vocabulary) and the cache length;
# its tokens and logits on the weights' seed and scale too (all in profile.model): values compare only
# between runs of the same model and cache. Conservative for the small workloads (fusion, gemm_bound...)
# that record step_ms too, whose own shapes are in their params.
_MODEL = ("profile:model", "profile:max_len")
# A time or rate over bytes: comparable only where the same bytes were moved (fusion records bytes_moved).
_BYTES = ("metric:bytes_moved",)
# Workloads whose shape is an option rather than a param of the values that depend on it.
_GEMM = tuple(f"option:gemm_bound.{k}" for k in ("batch", "dim", "layers", "dtype"))
_LAUNCH = ("option:launch_overhead.n_ops", "option:launch_overhead.width")
_AMDAHL = ("option:amdahl.decode_layers", "option:amdahl.block_batch", "option:amdahl.block_seq")

# Why counts of kernels, graphs and ops have no direction: they describe the program a method runs
# (a torch upgrade may fuse differently); what they cost is judged by the times beside them.
_STRUCTURE = " (a count describing the program, judged through the times: no direction)"

# ---------------------------------------------------------------------------- step times and speedups
# The workloads' shapes that are options (gemm_bound's, launch_overhead's, amdahl's) are conditions on their step
# times, so every figure derived from a step time inherits them (`derived_from`).
STEP_MS = declare("step_ms", units.MS, L, "median time of one step (or call) of the method",
                  comparable=_BYTES + _MODEL + _AMDAHL + _GEMM + _LAUNCH)
ROUND_MEDIANS_MS = declare("round_medians_ms", units.MS, N, "the median step time of each round, in round order "
                           "(the spread behind step_ms, judged through it)", kind=NUMBERS)
STEADY_MS = declare("steady_ms", units.MS, L, "median steady-state call time in the warm child process",
                    comparable=_MODEL)
EMPTY_MS = declare("empty_ms", units.MS, L, "median time of K torch.empty calls of the workload's size")
SETUP_S = declare("setup_s", units.S, L, "time to make the method ready: compile and/or capture, first call included",
                  comparable=_CACHE + _MODEL)
SPEEDUP_VS_EAGER = declare("speedup_vs_eager", units.X, H, "eager's median step time over this method's",
                           comparable=_MODEL, interval=("speedup_ci_low", "speedup_ci_high"), derived_from=("step_ms",))
SPEEDUP_CI_LOW = declare("speedup_ci_low", units.X, N, "low end of the 95% interval of the speedup stored beside it "
                         "with the same params (speedup_vs_eager, speedup_vs_peer, measured_speedup, ...): a bootstrap "
                         "over rounds, each round's steps one block, paired where the two sides ran in the same "
                         "rotating rounds (lab.contract.intervals); judged through that speedup",
                         comparable=_MODEL, derived_from=("step_ms",))
SPEEDUP_CI_HIGH = declare("speedup_ci_high", units.X, N, "high end of the 95% interval of the speedup stored beside it "
                          "with the same params (judged through that speedup)", comparable=_MODEL,
                          derived_from=("step_ms",))
SENTINEL_STEP_MS = declare("sentinel_step_ms", units.MS, L, "median step time measured in a fresh child process with "
                           "nothing else loaded, at the start or the end of the run (param when): the baseline the "
                           "run's own timings are checked against", comparable=_MODEL)
IN_RUN_OVER_SENTINEL = declare("in_run_over_sentinel", units.X, N, "the run's own eager (or graph) step time over the "
                               "fresh-process sentinel's at the start: 1 is an uncontaminated baseline (a check on the "
                               "instrument, no direction)", derived_from=("step_ms",))
SENTINEL_DRIFT = declare("sentinel_drift", units.X, N, "the sentinel's step time at the end of the run over its time "
                         "at the start: 1 is a host that did not change under the run (no direction)")
# ---------------------------------------------------------------------------- the host's speed (lab.contract.hostspeed)
HOST_INDEX_MS = declare("host_index_ms", units.MS, N, "the host-speed index around each round of the method, in round "
                        "order: the mean time of a fixed pure-Python loop (lab.measure.hostspeed) just before and just "
                        "after the method's turn (higher: a slower host; what the host did, no direction)", kind=NUMBERS)
HOST_INDEX_COST = declare("host_index_cost", units.FRACTION, L, "the host-speed index's own time over the time of the "
                          "turns it was taken around (the instrument's cost: at most 5%)")
HOST_INDEX_REFERENCE_MS = declare("host_index_reference_ms", units.MS, N, "the reference host speed of a timing: the "
                                  "10th percentile of its rounds' host index (the host near its fastest)")
HOST_SENSITIVITY, HOST_SENSITIVITY_CI_LOW, HOST_SENSITIVITY_CI_HIGH = _with_interval(
    "host_sensitivity", units.X, N, "the elasticity of the method's step time on the host-speed index: the slope of "
    "log(round median) on log(round index); 1 follows the host's CPU speed wholly, 0 not at all (a property of the "
    "method on this host, no direction)", " (a pairs bootstrap over rounds)")
STEP_MS_AT_REFERENCE, STEP_MS_AT_REFERENCE_CI_LOW, STEP_MS_AT_REFERENCE_CI_HIGH = _with_interval(
    "step_ms_at_reference", units.MS, L, "the method's step time at the timing's reference host speed "
    "(host_index_reference_ms), from its log-log fit on the host index", comparable=_MODEL, derived_from=("step_ms",))
SPEEDUP_AT_REFERENCE, SPEEDUP_AT_REFERENCE_CI_LOW, SPEEDUP_AT_REFERENCE_CI_HIGH = _with_interval(
    "speedup_at_reference", units.X, H, "eager's step time over the method's, both at the timing's reference host "
    "speed (beside the observed speedup_vs_eager)", " (rounds paired)", comparable=_MODEL, derived_from=("step_ms",))
IN_RUN_OVER_FRESH, IN_RUN_OVER_FRESH_CI_LOW, IN_RUN_OVER_FRESH_CI_HIGH = _with_interval(
    "in_run_over_fresh", units.X, N, "the run's own eager step over fresh processes', taking turns round by round "
    "under the same host conditions (paired): 1 is an instrument that does not move what it measures (no direction)",
    " (a bootstrap over the paired rounds)")
FRESH_OVER_FRESH, FRESH_OVER_FRESH_CI_LOW, FRESH_OVER_FRESH_CI_HIGH = _with_interval(
    "fresh_over_fresh", units.X, N, "one fresh process's eager step over a second's, taking turns with the run's "
    "(paired, per round): how far two processes that did nothing differ, the resolution of in_run_over_fresh "
    "(no direction)")
IN_RUN_CHANGE, IN_RUN_CHANGE_CI_LOW, IN_RUN_CHANGE_CI_HIGH = _with_interval(
    "in_run_change", units.X, N, "in_run_over_fresh at the run's end over the same at its start, against the same two "
    "fresh processes: what the run did to its own process, the processes' own constant parts cancelled (no "
    "direction)", " (the two ends' cycles drawn each on its own)")
FRESH_CHANGE, FRESH_CHANGE_CI_LOW, FRESH_CHANGE_CI_HIGH = _with_interval(
    "fresh_change", units.X, N, "fresh_over_fresh at the run's end over the same at its start: how far two processes "
    "that did nothing moved apart over the run, the resolution of in_run_change (no direction)",
    " (the two ends' cycles drawn each on its own)")
SPEEDUP = declare("speedup", units.X, H, "eager's median time over this method's (the compiled one where no method "
                  "is named)", comparable=_BYTES + _GEMM + _LAUNCH, interval=("speedup_ci_low", "speedup_ci_high"),
                  derived_from=("step_ms",))
SPEEDUP_VS_BROKEN_EAGER = declare("speedup_vs_broken_eager", units.X, H,
                                  "the broken step's eager median over this version and method's",
                                  comparable=("option:graph_break_repair.rows", "option:graph_break_repair.dim"),
                                  interval=("speedup_ci_low", "speedup_ci_high"))
MARGIN_VS_RUNNER_UP = declare("margin_vs_runner_up", units.X, N,
                              "the runner-up's median over the winner's (how clear the choice was)",
                              derived_from=("step_ms",))

# ---------------------------------------------------------------------------- correctness (outside timing)
TOKENS_EQUAL = declare("tokens_equal", units.BOOL, N, "the greedy tokens equal the reference's", kind=BOOL)
# What free-running agreement measures (the report renders this help and cuda_graph_decode notes it).
FREE_RUNNING_NOTE = ("free-running agreement with random weights measures divergence after near-ties, not error: "
                     "after the first near-tie a method picks the other token and the sequences part for good; "
                     "teacher_forced_agreement measures the error")
TOKEN_AGREEMENT = declare("token_agreement", units.FRACTION, H, "share of greedy tokens equal to the reference's "
                          f"({FREE_RUNNING_NOTE})", comparable=_MODEL)
TEACHER_FORCED_AGREEMENT = declare(
    "teacher_forced_agreement", units.FRACTION, H,
    "share of steps (x batch rows) whose argmax equals fp32 eager's when the method is fed fp32 eager's token at "
    "every step: each step judged on its own, so a near-tie costs one step, not the rest of the sequence "
    "(free-running agreement with random weights measures divergence after near-ties, not error)", comparable=_MODEL)
TEACHER_FORCED_MAX_LOGIT_ERROR = declare(
    "teacher_forced_max_logit_error", units.ABS, L,
    "largest |logit - fp32 eager's logit| over the teacher-forced steps (fed fp32 eager's tokens)", comparable=_MODEL)
CORRECT = declare("correct", units.BOOL, N, "the method passes the lab's correctness rule (lab.step.correctness): "
                  "its greedy tokens equal eager's in fp32 for eager's own kernels, else the teacher-forced rule "
                  "against bf16 eager's own rounding (bf16) or the fp32 allowance; what \"fastest correct\" "
                  "selects by", kind=BOOL)
MAX_LOGIT_DIFF = declare("max_logit_diff", units.ABS, L, "largest absolute logit difference from the reference",
                         comparable=_MODEL)
MAX_LOGIT_REL_DIFF = declare("max_logit_rel_diff", units.FRACTION, L,
                             "largest logit difference as a fraction of the reference's largest |logit|",
                             comparable=_MODEL)
DISTINCT_TOKENS_MIN = declare("distinct_tokens_min", units.COUNT, N, "fewest distinct tokens in any compared "
                              "sequence (equality of repetitive sequences would prove nothing)")
GARBAGE_SCALE = declare("garbage_scale", units.X, N, "scale of the random values written into unreached cache "
                        "slots (a setting, recorded beside the result)")

# ---------------------------------------------------------------------------- the host's tools (toolchain)
CXX_COMPILER_FOUND = declare("cxx_compiler_found", units.BOOL, N, "a C++ compiler Inductor would use was found",
                             kind=BOOL)
CXX_OFF_PATH = declare("cxx_off_path", units.COUNT, N, "C++ compilers found only off PATH (Inductor cannot use them)")
PYTHON_HEADERS = declare("python_headers", units.BOOL, N, "Python.h was found", kind=BOOL)
TRITON_IMPORTABLE = declare("triton_importable", units.BOOL, N, "Triton imports", kind=BOOL)
CUDA_AVAILABLE = declare("cuda_available", units.BOOL, N, "torch sees a CUDA device", kind=BOOL)
INDUCTOR_BACKEND_USABLE = declare("inductor_backend_usable", units.BOOL, N,
                                  "Inductor's backend (cpp or triton) has what it needs here", kind=BOOL)
PYTHON_EXTENSION_COMPILES = declare("python_extension_compiles", units.BOOL, N,
                                    "a file including Python.h compiles with the compiler found", kind=BOOL)

# ---------------------------------------------------------------------------- Dynamo: graphs, breaks, compiles
GRAPHS = declare("graphs", units.COUNT, N, "graphs Dynamo made" + _STRUCTURE)
DYNAMO_GRAPHS = declare("dynamo_graphs", units.COUNT, N, "graphs Dynamo made for the compiled step" + _STRUCTURE)
SYMBOLIC_GRAPHS = declare("symbolic_graphs", units.COUNT, N,
                          "graphs with a symbolic (dynamic) size among their inputs" + _STRUCTURE)
OPS = declare("ops", units.COUNT, N, "operations in the graphs explain saw" + _STRUCTURE)
EXPLAIN_OPS = declare("explain_ops", units.COUNT, N, "operations torch._dynamo.explain counted" + _STRUCTURE)
OP_NODES_FIRST_GRAPH = declare("op_nodes_first_graph", units.COUNT, N,
                               "call nodes in the first graph Dynamo made" + _STRUCTURE)
GRAPH_BREAKS = declare("graph_breaks", units.COUNT, L, "graph breaks: each one returns to Python mid-step")
COMPILES = declare("compiles", units.COUNT, L, "frames Dynamo compiled over the calls (each one costs a compile)")
COMPILED_FRAMES = declare("compiled_frames", units.COUNT, N, "frames Dynamo compiled while making this method ready "
                          "(0: it reused an earlier batch's graph; no direction: reuse depends on dynamic shapes)")
RECOMPILES = declare("recompiles", units.COUNT, L, "recompilations seen over repeated calls")
RECOMPILES_DURING_TIMING = declare("recompiles_during_timing", units.COUNT, L,
                                   "frames compiled during the timed rounds (should be 0)")
RECOMPILE_LIMIT = declare("recompile_limit", units.COUNT, N, "Dynamo's recompile limit (a setting of this torch)")
LIMIT_HIT = declare("limit_hit", units.BOOL, N, "Dynamo hit its recompile limit and fell back to eager", kind=BOOL)
CUDAGRAPH_SKIPS = declare("cudagraph_skips", units.COUNT, L,
                          "times Inductor declined CUDA graphs for this method (reasons in the notes)")
STEP_COMPILES = declare("step_compiles", units.BOOL, N, "the whole step compiles and runs", kind=BOOL)
OP_COMPILES = declare("op_compiles", units.BOOL, N, "this operation of the step compiles and runs on its own",
                      kind=BOOL)

# ---------------------------------------------------------------------------- kernels and where time goes
KERNELS = declare("kernels", units.COUNT, N, "kernels per call from the profiler: device kernels on CUDA, "
                  "outermost ops + generated kernels on the CPU" + _STRUCTURE)
KERNELS_PER_STEP = declare("kernels_per_step", units.COUNT, N, "kernels per decode step from the profiler (device "
                           "kernels on CUDA, outermost ops + generated kernels on the CPU)" + _STRUCTURE)
OPS_PER_STEP = declare("ops_per_step", units.COUNT, N, "ops (CPU) or kernels (CUDA) per call" + _STRUCTURE)
KERNEL_TIME_PER_STEP_US = declare("kernel_time_per_step_us", units.US, L, "time inside the step's kernels (GPU "
                                  "time on CUDA, the outermost ops' time on the CPU)", comparable=_MODEL)
GPU_BUSY_US = declare("gpu_busy_us", units.US, L, "GPU-busy time of one step: the union of its kernels' intervals on "
                      "the device (profiler, one step; kernels that overlap, as under programmatic dependent launch, "
                      "count once)", comparable=_MODEL)
GAP_US = declare("gap_us", units.US, L, "the median step time minus the GPU-busy time: the part of a step in which "
                 "no kernel runs (host launch work in eager, launch latency and bubbles between kernels in a graph)",
                 comparable=_MODEL, derived_from=("step_ms", "gpu_busy_us"))
ANATOMY_US = declare("anatomy_us", units.US, L, "median time a launch of one fused-step kernel, as the step binds it or "
                    "as a variant that leaves a stage out (param variant: lab.step.fused.stages), from a CUDA graph of "
                    "back-to-back launches over copies of what it streams")
ANATOMY_STEP_US = declare("anatomy_step_us", units.US, L, "median time of one whole fused step with every launch in "
                         "one variant (param variant: lab.step.fused.stages.STEP_VARIANTS; param method: the step's), "
                         "from a CUDA graph of the step")
STAGE_US, STAGE_US_CI_LOW, STAGE_US_CI_HIGH = _with_interval(
    "stage_us", units.US, L, "what one stage of a fused-step kernel costs a launch (param part: lab.step.fused.stages."
    "PARTS): the difference of two variants' anatomy_us; stages overlap, so the parts do not add up to the kernel",
    " (rounds paired)", derived_from=("anatomy_us",))
SPEEDUP_VS_FUSED, SPEEDUP_VS_FUSED_CI_LOW, SPEEDUP_VS_FUSED_CI_HIGH = _with_interval(
    "speedup_vs_fused", units.X, H, "the five-kernel fused step's fastest variant's median step time over this one's "
    "(param variant: the persistent step's grid; lab.experiments.fused_persistent), both captured and replayed in the "
    "same rotating rounds", " (rounds paired)", derived_from=("step_ms",))
PERSISTENT_PROGRAMS = declare("persistent_programs", units.COUNT, N, "programs of the persistent layer kernel the "
                              "device holds at once (its compiled registers and shared memory, the device's limits): "
                              "the largest grid its barrier may use" + _STRUCTURE)
MATMUL_SHARE = declare("matmul_share", units.FRACTION, N, "share of kernel time in matrix products (a property of "
                       "the workload: no direction)")
GEMM_SHARE = declare("gemm_share", units.FRACTION, N, "share of kernel time in GEMMs (a property of the workload: "
                     "no direction)")
FUSIBLE_FRACTION = declare("fusible_fraction", units.FRACTION, N,
                           "share of kernel time outside matrix products: what fusion can attack (no direction)")
HOST_SHARE = declare("host_share", units.FRACTION, N,
                     "share of the step the GPU waits on the host (a diagnosis, not a performance: no direction)")

# ---------------------------------------------------------------------------- ceilings and bounds
LAUNCH_US_PER_OP = declare("launch_us_per_op", units.US, L, "the cost of one tiny op (eager) or one node of a "
                           "replayed graph: the best of the samples")
LAUNCH_US_PER_OP_SAMPLES = declare("launch_us_per_op_samples", units.US, L,
                                   "the samples behind launch_us_per_op (median and spread)")
BANDWIDTH_GBPS = declare("bandwidth_GBps", units.GBPS, H, "device copy bandwidth: the best of the samples")
BANDWIDTH_GBPS_SAMPLES = declare("bandwidth_GBps_samples", units.GBPS, H,
                                 "the samples behind bandwidth_GBps (median and spread)")
MATMUL_TFLOPS = declare("matmul_TFLOPs", units.TFLOPS, H, "matmul peak: the best of the samples")
MATMUL_TFLOPS_SAMPLES = declare("matmul_TFLOPs_samples", units.TFLOPS, H,
                                "the samples behind matmul_TFLOPs (median and spread)")
LAUNCH_COST_BASIS = declare("launch_cost_basis", units.NONE, N,
                            "which per-kernel cost the launch bound uses: eager or graph_node", kind=TEXT)
BYTES_PER_STEP = declare("bytes_per_step", units.BYTES, N, "bytes a step must read: every weight once and the K and V "
                         "of the cache slots it attends, averaged over the timed decode (lab.step.ceilings.decode_bytes)")
FLOPS_PER_STEP = declare("flops_per_step", units.FLOP, N, "floating-point operations a step must do (attention over "
                         "the attended slots, averaged over the timed decode)")
BOUND_LAUNCH_MS = declare("bound_launch_ms", units.MS, L, "lower bound on a step: kernels x per-kernel launch cost",
                          comparable=_MODEL)
BOUND_BANDWIDTH_MS = declare("bound_bandwidth_ms", units.MS, L, "lower bound on a step: bytes / bandwidth",
                             comparable=_MODEL)
BOUND_COMPUTE_MS = declare("bound_compute_ms", units.MS, L, "lower bound on a step: FLOPs / matmul peak",
                           comparable=_MODEL)
BOUND_MS = declare("bound_ms", units.MS, L, "the largest of the three bounds: no step can be faster", comparable=_MODEL)
BINDING = declare("binding", units.NONE, N, "which bound binds: launch, bandwidth or compute", kind=TEXT)
MEASURED_MS = declare("measured_ms", units.MS, L, "the measured step time the bounds are set against",
                      comparable=_MODEL, derived_from=("step_ms",))
MEASURED_OVER_BOUND = declare("measured_over_bound", units.X, L, "measured step time over its bound: how far from "
                              "the ceiling (1 is at it)", comparable=_MODEL, derived_from=("step_ms", "bound_ms"))
ACHIEVED_GBPS = declare("achieved_GBps", units.GBPS, H, "bytes moved per second at the measured time",
                        comparable=_BYTES + _MODEL, derived_from=("step_ms",))
MBU, MBU_CI_LOW, MBU_CI_HIGH = _with_interval(
    "mbu", units.FRACTION, H, "memory-bandwidth utilisation: bytes_per_step / the step's own median time / the copy "
    "bandwidth (lab.step.ceilings.mbu; 1 is the byte floor), stored once by the experiment that timed the step",
    " (the step time's 95% interval, over the copy bandwidth as measured: the bandwidth's own spread is not in it; "
    "stored where the step was timed in rounds)", comparable=_MODEL,
    derived_from=("step_ms", "bytes_per_step", "bandwidth_GBps"))
ACHIEVED_TFLOPS = declare("achieved_TFLOPs", units.TFLOPS, H, "FLOPs per second at the measured time", comparable=_GEMM,
                          derived_from=("step_ms",))

# ---------------------------------------------------------------------------- graph capture and memory
CAPTURE_S = declare("capture_s", units.S, L, "warm-up + capture of a CUDA graph", comparable=_MODEL)
WARMUP_S = declare("warmup_s", units.S, L, "the side-stream warm-up before capture")
CAPTURE_ONLY_S = declare("capture_only_s", units.S, L, "the capture itself")
STATE_MIB = declare("state_MiB", units.MIB, L, "the decode state and KV cache, by tensor sizes", comparable=_MODEL)
STATE_ALLOCATED_MIB = declare("state_allocated_MiB", units.MIB, L, "what allocating the state took from the allocator")
GRAPH_POOL_MIB = declare("graph_pool_MiB", units.MIB, L, "what the graph's private memory pool reserved",
                         comparable=_MODEL)
WEIGHTS_MIB = declare("weights_MiB", units.MIB, N, "the model's weights (a property of the model)")
SAVING_MS_PER_STEP = declare("saving_ms_per_step", units.MS, H, "eager's step time minus the method's (graph replay's "
                              "in graph_cost)", comparable=_MODEL, derived_from=("step_ms",))
BREAK_EVEN_STEPS = declare("break_even_steps", units.STEPS, L, "steps after which the method's setup (capture and/or "
                           "compile) has paid for itself: setup / saving per step (null: never, it saves nothing)",
                           comparable=_CACHE + _MODEL, derived_from=("setup_s", "saving_ms_per_step"))

# ---------------------------------------------------------------------------- compile cost (fresh processes)
FIRST_CALL_S = declare("first_call_s", units.S, L, "the first call of the compiled function in a fresh process: "
                       "tracing, lowering, code generation, compilation (the phase param says which cache state)",
                       comparable=_MODEL)
SAVING_MS_PER_CALL = declare("saving_ms_per_call", units.MS, H, "eager's call time minus compiled's, in that phase's "
                             "process", comparable=_MODEL, derived_from=("steady_ms",))
BREAK_EVEN_CALLS = declare("break_even_calls", units.CALLS, L, "calls after which the compile has paid for itself "
                           "(null: never)", comparable=_MODEL, derived_from=("first_call_s", "saving_ms_per_call"))
CACHE_REUSED = declare("cache_reused", units.BOOL, N, "the populated FX graph cache was hit under this setting",
                       kind=BOOL)

# ---------------------------------------------------------------------------- graph hazards
REPLACED_INPUT_TOKENS_EQUAL_UNTOUCHED = declare(
    "replaced_input_tokens_equal_untouched", units.BOOL, N,
    "after replacing a captured input tensor, replay's tokens equal an untouched run's (the hazard)", kind=BOOL)
COPIED_INPUT_CHANGES_TOKENS = declare("copied_input_changes_tokens", units.BOOL, N,
                                      "copying into the captured input changes replay's tokens (the remedy)", kind=BOOL)
CHILD_DIED = declare("child_died", units.BOOL, N, "stepping past the cache end ended the child process", kind=BOOL)
CHILD_EXIT_CODE = declare("child_exit_code", units.NONE, N, "the child's exit status (null: killed or timed out)")
DEVICE_ASSERT_SEEN = declare("device_assert_seen", units.BOOL, N, "the child's stderr shows a device-side assert",
                             kind=BOOL)
EAGER_CPU_EXCEPTION_CAUGHT = declare("eager_cpu_exception_caught", units.BOOL, N,
                                     "eager past the cache end on the CPU raised a catchable exception", kind=BOOL)
GUARD_RAISED = declare("guard_raised", units.BOOL, N, "GraphedStep's host guard raised before the cache end",
                       kind=BOOL)
GUARD_REPLAYS_BEFORE_ERROR = declare("guard_replays_before_error", units.STEPS, N,
                                     "replays GraphedStep allowed before its guard raised (set by the cache size)")

# ---------------------------------------------------------------------------- overheads
BYTES_MOVED = declare("bytes_moved", units.BYTES, N, "bytes read and written per call: each op's (eager) or one "
                      "read and one write (fused)")
CEILING_X = declare("ceiling_x", units.X, N, "the fusion ceiling: N ops fused move N times fewer bytes (a property of "
                    "the chain)")
US_PER_OP = declare("us_per_op", units.US, L, "step time per op", comparable=_LAUNCH, derived_from=("step_ms",))
US_PER_OP_REMOVED = declare("us_per_op_removed", units.US, H, "(eager - method) per op: the overhead removed",
                            comparable=_LAUNCH, derived_from=("step_ms",))
ALLOCATIONS_PER_STEP = declare("allocations_per_step", units.COUNT, L, "caching-allocator allocations per call (CUDA)")
US_PER_INTERMEDIATE = declare("us_per_intermediate", units.US, L,
                              "(allocating - method) per intermediate: what one intermediate tensor costs",
                              comparable=("option:allocation.k", "option:allocation.numel"))
US_PER_EMPTY = declare("us_per_empty", units.US, L, "one torch.empty of the workload's size")

# ---------------------------------------------------------------------------- Amdahl
K = declare("k", units.X, N, "how much faster fusion makes the fusible part (measured by fusion, or assumed 3): an "
            "input of the prediction")
PREDICTED_SPEEDUP = declare("predicted_speedup", units.X, N, "Amdahl's prediction 1 / ((1 - f) + f / k): a "
                            "prediction, not a performance")
MEASURED_SPEEDUP = declare("measured_speedup", units.X, H, "the compile speedup measured for the workload",
                           comparable=_MODEL + _AMDAHL, interval=("speedup_ci_low", "speedup_ci_high"),
                           derived_from=("step_ms",))
MEASURED_OVER_PREDICTED = declare("measured_over_predicted", units.X, N,
                                  "measured over predicted speedup: 1 is a perfect prediction (no direction)")
PREDICTED_SPEEDUP_LAUNCH = declare(
    "predicted_speedup_launch", units.X, N, "the launch-aware prediction: (eager kernels x cost per launch + eager "
    "kernel time) / (compiled kernels x cost per launch + eager kernel time x ((1 - f) + f / k)), the cost per launch "
    "from this run's ceilings (Amdahl's prediction is its case of free launches): a prediction, not a performance")
MEASURED_OVER_PREDICTED_LAUNCH = declare("measured_over_predicted_launch", units.X, N,
                                         "measured over the launch-aware predicted speedup: 1 is a perfect prediction")

# ---------------------------------------------------------------------------- verdicts (diagnose, selection)
VERDICT = declare("verdict", units.NONE, N, "diagnose's verdict: graph-broken, recompiling, gemm-bound, launch-bound, "
                  "dispatch-bound, fusion or no-overhead", kind=TEXT)
WINNER = declare("winner", units.NONE, N, "the method with the lowest step time (eager on a tie inside the spread)",
                 kind=TEXT, derived_from=("step_ms",))
WINNER_FAMILY = declare("winner_family", units.NONE, N, "the winner's family: eager, compile, graph or compile+graph",
                        kind=TEXT, derived_from=("step_ms",))
TIE_WITH_EAGER = declare("tie_with_eager", units.BOOL, N, "the fastest method was inside eager's spread", kind=BOOL,
                         derived_from=("step_ms",))
CASES = declare("cases", units.COUNT, N, "cases the selection rule was applied to")

# ---------------------------------------------------------------------------- sweeps (issue 14: model size, context length,
# batch buckets, a data-dependent stop, transformers' own generate)
CONCLUSION = declare("conclusion", units.NONE, N, "one sentence drawn from the experiment's stored numbers by the rule "
                     "written in its module (the rule is in the notes: conclusion_rule)", kind=TEXT)
OUTCOME = declare("outcome", units.NONE, N, "how a variant ended: OK, FAILED (the error in the notes and the skipped "
                  "list) or NOT_RUN (the reason in the skipped list)", kind=TEXT)
SPEEDUP_VS_PEER = declare("speedup_vs_peer", units.X, H, "the best transformers generate variant's ms per token over "
                          "this lab method's, same batch, same weights", interval=("speedup_ci_low", "speedup_ci_high"),
                          derived_from=("step_ms",))
FLOPS_PER_KERNEL = declare("flops_per_kernel", units.FLOP, N, "FLOPs per step / kernels per step: the arithmetic behind "
                           "one launch (a property of the shape and the method)")
GAIN_RATIO = declare("gain_ratio", units.X, N, "a method's speedup over eager at the largest model over its speedup at "
                     "the smallest (below 1: the gain shrank as the model grew)", derived_from=("step_ms",))
CROSSOVER_MAX_LEN = declare("crossover_max_len", units.COUNT, N, "the cache length in slots at which the fixed-shape "
                            "step with graph replay stops beating the best growing-cache step (null: not within the "
                            "lengths measured; the notes say which side won)")
WASTE_FRACTION = declare("waste_fraction", units.FRACTION, L, "padded rows over rows computed, for a uniform mix of "
                         "batch sizes each run on the smallest bucket that holds it")
EXPECTED_STEP_MS = declare("expected_step_ms", units.MS, L, "mean step time over a uniform mix of batch sizes, each run "
                           "on the smallest bucket that holds it", derived_from=("step_ms",))
TIME_MEMORY_SCORE = declare("time_memory_score", units.X, L, "expected step time x graph memory of a ladder, relative "
                            "to one graph per batch size (1): lower is better")
BUCKET_GRAPHS = declare("bucket_graphs", units.COUNT, N, "CUDA graphs a bucket ladder captures")
CAPTURES = declare("captures", units.BOOL, N, "a CUDA graph capture of the step succeeded", kind=BOOL)
STOPPED_AT_STEP = declare("stopped_at_step", units.STEPS, N, "the decode step after which every row had produced the "
                          "end-of-sequence token (null: not within the steps run)")
