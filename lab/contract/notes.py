"""Every note: each declared once with its key, type and writers; written and read only through its declaration.

A record's `notes` hold non-numeric evidence. Most are for a human reading results.json (graph-break reasons,
the kernels that took the time): nothing parses them, they are declared of any shape (`_any`). Those in `NOTES`
are read back, by the report or the README tables, so they are a contract as the metrics are: `Context.note`
(lab.run.context) refuses a value of the wrong shape for a declared key, and the report looks them up through
these declarations (`CROSSOVERS.entry_for(batch=1, fill=0.5)`), never by a key it spells itself.

A key is a name (`conclusion_rule`) or a pattern with `{placeholders}` (`errors.{variant}.b{batch}`); a
note of a dict may declare the pattern of its entries' keys and the fields every entry has.
Standard library only (the report imports it without torch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lab.contract.names import Experiment as E
from lab.contract.profiles import SWEEPS

NUMBER = (int, float)
KINDS: dict[type | tuple[type, ...], str] = {str: "text", list: "list", dict: "object", NUMBER: "number",
                                             object: "any"}


def _regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", pattern)
    body = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(f"^{body}$")


@dataclass(frozen=True)
class NoteSpec:
    """One note that is read back: its key (or key pattern), the JSON type of its value, who writes it."""

    key: str
    type: type | tuple[type, ...]
    help: str
    experiments: tuple[str, ...] = ()  # the experiments that write it; () for any experiment
    entries: str = ""  # for an object: the pattern of its keys ("batch {batch}, fill {fill}"); "" for any key
    fields: tuple[str, ...] = ()  # for an object: the fields each entry has (with `entries`) or it has itself

    @property
    def kind(self) -> str:
        return KINDS[self.type]

    def key_for(self, *values: Any, **parts: Any) -> str:
        """The key of one note of a pattern: `ERRORS.key_for(variant="static", batch=1)` (or positionally)."""
        names = re.findall(r"\{(\w+)\}", self.key)
        given = dict(zip(names, values)) | parts
        return self.key.format(**given)

    def entry_for(self, **parts: Any) -> str:
        """The key of one entry of an object note whose entries follow a pattern."""
        return self.entries.format(**parts)

    def parse(self, key: str) -> dict[str, str] | None:
        """The placeholders of `key` if it is a key of this note, else None."""
        m = _regex(self.key).match(key)
        return None if m is None else m.groupdict()

    def written_by(self, experiment: str) -> bool:
        return not self.experiments or experiment in self.experiments

    def problem(self, value: Any) -> str | None:
        """Why `value` is not this note's shape, or None."""
        if not isinstance(value, self.type) or (isinstance(value, bool) and self.type is not object):
            return f"is declared {self.kind} (lab/contract/notes.py), got {type(value).__name__}"
        if not isinstance(value, dict):
            return None
        entries = value.items() if self.entries else [("", value)]
        for name, entry in entries:
            if self.entries and _regex(self.entries).match(str(name)) is None:
                return f"entry {name!r} does not follow the declared key pattern {self.entries!r}"
            missing = [f for f in self.fields if not isinstance(entry, dict) or f not in entry]
            if missing:
                where = f"entry {name!r}" if self.entries else "it"
                return f"{where} lacks the declared field(s) {', '.join(missing)}"
        return None


CONCLUSION_RULE = NoteSpec("conclusion_rule", str, "the rule that drew the `conclusion` metric from the stored "
                                                   "numbers (the sweeps' pages print it)", SWEEPS)
COMPILE_TRACES = NoteSpec("compile_traces", dict, "each compiled item's stored trace (lab.measure.compiletrace): "
                                                  "its path in the run folder and its counts",
                          entries="{item}", fields=("path", "compile_count", "recompile_count", "failed_count",
                                                    "graph_break_count", "tlparse"))
# The experiments that run cuda_graph_decode's measurement (compile_tuning: its tuned compiles at every batch)
STEP_METHODS = ("cuda_graph_decode", "compile_tuning")
DECODE_CONFIG = NoteSpec("config", dict, "what cuda_graph_decode ran: prompt length, steps, rounds, methods, "
                                         "batches (the README tables quote it)", STEP_METHODS,
                         fields=("prompt_len", "steps", "rounds", "max_len", "batches"))
CROSSOVERS = NoteSpec("crossovers", dict, "per batch and fill: how the fixed-shape step's time compares with the "
                                          "best growing cache's at each length", ("context_scaling",),
                      entries="batch {batch}, fill {fill}", fields=("how", "fixed_over_best_growing"))
LADDERS = NoteSpec("ladders", dict, "each bucket ladder's captured batch sizes", ("graph_buckets",),
                   entries="{ladder}")
OCCUPANCY = NoteSpec("occupancy.{size}.{dtype}.{batch}", str, "how many programs of the persistent layer kernel the "
                     "device holds at once, and from what (registers, shared memory, warps)", ("fused_persistent",))
PARAMETERS = NoteSpec("parameters.{size}", NUMBER, "the parameter count of each model size", ("model_scaling",))
ERRORS = NoteSpec("errors.{variant}.b{batch}", str, "why a generate variant did not finish at a batch",
                  ("peer_generate",))
BREAK_REASONS = NoteSpec("break_reasons.{version}.b{batch}", list, "Dynamo's graph-break reasons of a version "
                                                                   "of the step", ("data_dependent_branch",))
FULLGRAPH_ERROR = NoteSpec("fullgraph_error.{version}.b{batch}", str, "why fullgraph=True refused a version of "
                                                                      "the step", ("data_dependent_branch",))
CAPTURE_ERROR = NoteSpec("capture_error.b{batch}", str, "why capturing the host-checked step failed",
                         ("data_dependent_branch",))
BREAK_EVEN_INCLUDES = NoteSpec("break_even_includes.b{batch}.{dtype}", dict, "the methods whose break_even_steps "
                                                                          "also pays for the compile they reused, "
                                                                          "and whose compile it was",
                                STEP_METHODS)
CUDAGRAPH_SKIP_REASONS = NoteSpec("cudagraph_skip_reasons.{method}", list, "why cudagraph trees skipped graphs "
                                                                           "for a method", STEP_METHODS)
FUNCTION_REASONS = NoteSpec("reasons.{function}", list, "Dynamo's graph-break reasons for each function",
                            ("graph_breaks", "graph_break_repair"))
WARMUP = NoteSpec("warmup.{when}", dict, "how the sentinel's child warmed up before its kept rounds "
                                         "(lab.measure.timing.warm_until_steady): warm-up rounds and seconds over "
                                         "every take, retakes, whether the last warm-up settled, its round medians, "
                                         "the kept round medians per method, the methods still improving, the "
                                         "warm-up budget and whether it ran out",
                  ("sentinel", "sentinel_end"), fields=("rounds", "seconds", "retakes", "warmup_steady",
                                                        "warmup_medians_ms", "round_medians_ms", "drifting",
                                                        "budget_s", "out_of_budget"))
PLACEMENT = NoteSpec("placement.{when}", dict, "where the sentinel's child ran (lab.host.cpuplace): LAB_CPU_BIND as "
                                               "applied, the CPUs it was allowed, the host's NUMA nodes, the GPU's "
                                               "node, and the CPU each of its eager rounds ended on (two fresh "
                                               "processes on one host can differ by a third in eager step time)",
                     ("sentinel", "sentinel_end"), fields=("bind", "allowed", "numa_nodes", "gpu_node", "ran_on",
                                                           "round_cpus"))
CONSOLE_IN_TIMING = NoteSpec("console_writes_in_timing", dict, "writes of the console (a line, a redraw) that fell "
                                                             "inside a timed section, by section (lab.heartbeat): the "
                                                             "runner writes it, for any experiment", entries="{section}")
HOST_WARNINGS = NoteSpec("host_warnings", list, "what the host did that the run measured and reports as the host's, "
                                               "never as a failed check: its speed moved while a fresh process warmed "
                                               "up, or between the start and the end of the run, or while a CPU "
                                               "timing's rounds ran (gemm_bound)",
                         ("sentinel", "sentinel_end", "gemm_bound"))
PAIRED_ROUNDS = NoteSpec("paired_rounds", dict, "the paired rounds of the run's start or end: the CPU every process "
                                                "was pinned to (per side; None: not pinned), per side and round what "
                                                "the host and the process did meanwhile (lab.host.procstat: the CPU, "
                                                "the thread's run-queue wait, the other threads' CPU time, the steal) "
                                                "and every step (ms)",
                         ("sentinel", "sentinel_end"), fields=("pinned", "rounds"))
HOST_INDEX = NoteSpec("host_index.{shape}", dict, "the host-speed index of one timing (lab.measure.hostspeed): the "
                                                   "workload, its cost over the turns' time, and every raw sample "
                                                   "(ms) before and after each method's turn, per round",
                      (*STEP_METHODS, "model_scaling", "peer_generate", "inductor", "sentinel",
                       "sentinel_end", "gemm_bound"), fields=("workload", "loop", "cost", "turns"))
KERNEL_ROWS = "kernels"  # the fused_kernels note's per-kernel rows, and its fit's list of the kernels fitted
FUSED_KERNELS = NoteSpec("fused_kernels.{method}.{shape}", dict, "the hand-fused step kernel by kernel, from one "
                                                                   "profiled step (lab.step.fused.breakdown): calls, "
                                                                   "us and bytes per call, achieved GB/s, share of "
                                                                   "the step, the latency + bytes/bandwidth fit",
                         ("cuda_graph_decode", "model_scaling", "peer_generate"),
                         fields=("method", "params", "path", "position", "additive", "step_us", KERNEL_ROWS, "fit", "why"))
FUSED_LAYOUTS = NoteSpec("fused_layouts.{method}.{shape}", dict, "how the hand-fused step's gemm path calls the "
                                                                 "library for each projection (lab.step.fused.layout):"
                                                                 " the form chosen when the method was built, the "
                                                                 "default, why, and every candidate form's median us "
                                                                 "a call or why it was not timed",
                         ("cuda_graph_decode", "model_scaling", "peer_generate"),
                         fields=("method", "params", "timed", "why", "allow_tf32", "extra_bytes", "projections"))


def _any(key: str, help: str, *experiments: str) -> NoteSpec:
    """A note only people read (nothing parses it): declared for its key and writers, of any JSON shape."""
    return NoteSpec(key, object, help, experiments)


# The notes nobody parses, declared so that each is written (and read back, if ever) by its declaration only.
# Written by lab.experiments.common.methods for whichever experiment builds the methods:
BUILD_ERROR = _any("build_error.{method}.{params}", "the traceback of a method that could not be built")
FIRST_DISAGREEMENT = _any("teacher_forced_first_disagreement.{method}.{params}", "where it first differs from eager")
TOP_KERNELS = _any("top_kernels.{method}.{shape}", "a method's most expensive kernels, from its profiled step")
TOOLCHAIN = _any("toolchain", "the toolchain the lab found (lab.host.toolchain)", E.TOOLCHAIN)
COMPILER = _any("compiler", "the C++ compiler found, where, and whether Inductor agrees", E.TOOLCHAIN)
MSVC = _any("msvc", "what the MSVC probe found", E.TOOLCHAIN)
BACKEND_REASON = _any("reason.{backend}", "why one of Inductor's backends is not usable", E.TOOLCHAIN)
CHILD_S = _any("child_s", "each fresh process's wall time beside its first call, by label", E.COMPILE_COST)
SETTINGS = _any("settings", "what the experiment ran: its sizes, steps, rounds", E.COMPILE_COST, E.INDUCTOR)
CACHE_PROVENANCE = _any("cache_provenance.{target}", "what a compile cache's entries are valid for", E.COMPILE_COST)
NEVER_PAYS = _any("never_pays.{target}.{phase}", "why a compile never pays back", E.COMPILE_COST)
COUNTERS = _any("counters.{target}.{phase}", "Dynamo's counters in a child process", E.COMPILE_COST)
SIZES = _any("sizes", "the copy and matmul sizes that measured the ceilings", E.CEILINGS)
TF32_MATMUL = _any("tf32_matmul_allowed", "whether fp32 matmuls could use TF32", E.CEILINGS)
STEP_SOURCE = _any("step_source", "where the step times bounded came from", E.CEILINGS)
ATTENDED_SLOTS = _any("attended_slots", "the cache slots a step attends to, and how they were counted", E.CEILINGS)
SWEEP_CONFIG = _any("config", "what it ran", E.GRAPH_BUCKETS, E.CONTEXT_SCALING, E.MODEL_SCALING, E.PEER_GENERATE,
                    E.DATA_DEPENDENT_BRANCH)
DIAGNOSE_REPORT = _any("report.{target}", "diagnose's report of a target, line by line", E.DIAGNOSE)
SHAPE = _any("shape", "the shape the experiment timed", E.LAUNCH_OVERHEAD, E.GEMM_BOUND, E.GRAPH_BREAK_REPAIR)
TOKEN_AGREEMENT = _any("token_agreement", "what free-running token agreement means", E.CUDA_GRAPH_DECODE, E.COMPILE_TUNING)
PHASE_S = _any("phase_s", "where the experiment's time went, by phase", E.CUDA_GRAPH_DECODE, E.COMPILE_TUNING)
PROFILER_GUARD = _any("profiler_guard", "the profiler sessions, CUPTI torn down after them?", E.CUDA_GRAPH_DECODE, E.COMPILE_TUNING)
TF32 = _any("tf32", "whether matmuls and cuDNN could use TF32", E.CUDA_GRAPH_DECODE, E.COMPILE_TUNING)
REPLACED_INPUT = _any("replaced_input", "a graph's tokens, its input replaced or copied into", E.GRAPH_HAZARDS)
PAST_END = _any("past_end", "what replaying past the cache's end did", E.GRAPH_HAZARDS)
FUSION_BYTES = _any("bytes", "the input sizes, cache- and memory-resident", E.FUSION)
FUSION_DTYPE = _any("dtype", "the chain's dtype", E.FUSION)
KERNELS_MEANING = _any("kernels_meaning", "what a kernel count means on this device", E.FUSION)
OVER_CEILING = _any("speedup_over_ceiling.{residency}", "the longest chain's speedup over its op count", E.FUSION)
INDEXED_ERROR = _any("indexed_error", "why the indexed step did not compile", E.INDUCTOR)
BISECT = _any("bisect", "each op of the indexed step, compiled alone", E.INDUCTOR)
SMALLEST_FAILING = _any("smallest_failing_ops", "the ops that do not compile alone", E.INDUCTOR)
K_SOURCE = _any("k_source.{workload}", "where a workload's kernel count came from", E.AMDAHL)
TOP = _any("top.{item}", "the most expensive kernels of a workload or a method", E.AMDAHL, E.GEMM_BOUND)
MEASURED_SOURCE = _any("measured_source.{workload}", "where a workload's measured speedup came from", E.AMDAHL)
COMPILED_KERNELS_SOURCE = _any("compiled_kernels_source.{workload}", "whence the compiled kernel count", E.AMDAHL)
DECODE_LAYERS = _any("decode_layers", "the decode step's layers", E.AMDAHL)
BLOCK_SHAPE = _any("block_shape", "the transformer block's input shape", E.AMDAHL)
EVIDENCE = _any("evidence.{workload}.{case}", "the candidates behind a choice, and those skipped", E.SELECTION)
TRENDS = _any("trends", "each case's speedup from the smallest model to the largest", E.MODEL_SCALING)
FIXED_STEPS = _any("steps", "the steps compared", E.FIXED_STEP_EQUIVALENCE)
FIXED_BATCH = _any("batch", "the batch compared", E.FIXED_STEP_EQUIVALENCE)
RECOMPILE_LIMIT_NAME = _any("recompile_limit_name", "torch's name of the recompile limit", E.RECOMPILES)
BATCH_SIZES = _any("batch_sizes", "the batch sizes called with", E.RECOMPILES)
GRAPH_INPUT_SHAPES = _any("graph_input_shapes.{dynamic}", "each compiled graph's input shapes", E.RECOMPILES)
RECOMPILE_REASONS = _any("recompile_reasons.{dynamic}", "Dynamo's recompile reasons", E.RECOMPILES)
STEP_RECOMPILE_REASONS = _any("recompile_reasons.{step}.{dynamic}", "a step's recompile reasons", E.DECODE_RECOMPILES)
STEP_BREAK_REASONS = _any("break_reasons.{step}", "Dynamo's graph-break reasons of a step", E.DECODE_RECOMPILES)
ALLOCATIONS = _any("allocations_per_step", "allocations per step where no counter measures them", E.ALLOCATION)
CHILD = _any("child.{variant}", "how a variant's child process ended when it failed", E.PEER_GENERATE)
CALLS = _any("calls.{variant}.b{batch}", "the seconds of a variant's warm and steady calls", E.PEER_GENERATE)
CAPTURE_CHILD_EXIT = _any("capture_child_exit.b{batch}", "its capture child died, answered", E.DATA_DEPENDENT_BRANCH)
CAPTURE_CHILD = _any("capture_child.b{batch}", "how its capture child ended with no answer", E.DATA_DEPENDENT_BRANCH)

NOTES: tuple[NoteSpec, ...] = (CONCLUSION_RULE, COMPILE_TRACES, DECODE_CONFIG, CROSSOVERS, LADDERS, PARAMETERS, ERRORS,
                               BREAK_REASONS, FULLGRAPH_ERROR, CAPTURE_ERROR, CUDAGRAPH_SKIP_REASONS, FUNCTION_REASONS,
                               WARMUP, PLACEMENT, CONSOLE_IN_TIMING, FUSED_KERNELS, FUSED_LAYOUTS, HOST_INDEX,
                               HOST_WARNINGS)


def declared(experiment: str, key: str) -> NoteSpec | None:
    """The declaration of note `key` written by `experiment`, or None (a note nothing reads back)."""
    return next((n for n in NOTES if n.written_by(experiment) and n.parse(key) is not None), None)


def check(experiment: str, key: str, value: Any) -> str | None:
    """Why `experiment` may not write `value` under `key` (one line naming both), or None."""
    spec = declared(experiment, key)
    problem = None if spec is None else spec.problem(value)
    return None if problem is None else f"{experiment} noted {key!r}, which {problem}"


def problems(experiment: str, notes: dict[str, Any]) -> list[str]:
    """Every declared note of a record's `notes` that is not of its declared shape (those written into the
    record directly, not through `Context.note`, are checked when the experiment ends)."""
    found = (check(experiment, k, v) for k, v in notes.items())
    return [p for p in found if p is not None]
