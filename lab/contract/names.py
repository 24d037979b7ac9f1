"""The names of the ways to run a step: one enum, imported by the step-method table, the
experiments, selection, bench, compare and the report (standard library only: the report runs
without torch).

A `Method` is a `str`, so it is written to results.json as its value ("compile+graph") and compares
equal to that string when a results file is read back.
"""

from __future__ import annotations

from enum import StrEnum


class Method(StrEnum):
    EAGER = "eager"  # the step as written, one kernel launch per op
    GRAPH = "graph"  # the eager step captured once by hand (lab.step.graphs.GraphedStep) and replayed
    COMPILE_DEFAULT = "compile-default"  # torch.compile, default mode (Dynamo + Inductor)
    REDUCE_OVERHEAD = "reduce-overhead"  # torch.compile(mode="reduce-overhead"): cudagraph trees
    REDUCE_OVERHEAD_STATIC = "reduce-overhead-static"  # ... with the state given static addresses
    COMPILE_GRAPH = "compile+graph"  # compiled (default mode), then captured by hand
    # Inductor's levers on compile+graph, each one config switch (lab.step.methods reads the names
    # from the installed torch and skips a row whose switch this torch lacks)
    COMPILE_GRAPH_COMBO = "compile+graph+combo"  # combo_kernels: independent kernels fused horizontally
    COMPILE_GRAPH_PDL = "compile+graph+pdl"  # triton.enable_pdl: programmatic dependent launch (Hopper+)
    COMPILE_GRAPH_COORDESC = "compile+graph+coord-descent"  # coordinate_descent_tuning of each kernel's config
    MAX_AUTOTUNE = "max-autotune-no-cudagraphs"  # torch.compile(mode="max-autotune-no-cudagraphs")
    MAX_AUTOTUNE_GRAPH = "max-autotune+graph"  # the same compile, then captured by hand
    # the hand-fused step (lab.step.fused): 62 Triton kernels, captured by hand
    FUSED = "fused"
    FUSED_PDL = "fused-pdl"  # ... launched with programmatic dependent launch (Hopper+)
    FUSED_PDL_PREFETCH = "fused-pdl-prefetch"  # ... with every weight read before each kernel's PDL wait


class Variant(StrEnum):
    """Other labels an experiment times beside the methods: the same work written another way."""

    GRAPH_NO_CLONE = "graph-no-clone"  # manual_graph_recipe: replay without cloning the static output
    ALLOCATING = "allocating"  # allocation: each op returns a fresh tensor (the eager way)
    PLANNED = "planned"  # allocation: each op writes into one of two buffers allocated once
    IN_PLACE = "in-place"  # allocation: no output tensor at all


class Family(StrEnum):
    """The chapter's four answers to "which way should this step run?" (experiments/selection.py)."""

    EAGER = "eager"
    COMPILE = "compile"
    GRAPH = "graph"
    COMPILE_GRAPH = "compile+graph"


FAMILY: dict[str, Family] = {
    Method.EAGER: Family.EAGER, Method.GRAPH: Family.GRAPH, Method.COMPILE_DEFAULT: Family.COMPILE,
    Method.MAX_AUTOTUNE: Family.COMPILE, Method.COMPILE_GRAPH: Family.COMPILE_GRAPH,
    # reduce-overhead is compile plus cudagraph trees: compile+graph by another road
    Method.REDUCE_OVERHEAD: Family.COMPILE_GRAPH, Method.REDUCE_OVERHEAD_STATIC: Family.COMPILE_GRAPH,
    Method.COMPILE_GRAPH_COMBO: Family.COMPILE_GRAPH, Method.COMPILE_GRAPH_PDL: Family.COMPILE_GRAPH,
    Method.COMPILE_GRAPH_COORDESC: Family.COMPILE_GRAPH, Method.MAX_AUTOTUNE_GRAPH: Family.COMPILE_GRAPH,
    # the hand-fused step is compiled by hand (62 kernels instead of Inductor's 147), then captured
    Method.FUSED: Family.COMPILE_GRAPH, Method.FUSED_PDL: Family.COMPILE_GRAPH,
    Method.FUSED_PDL_PREFETCH: Family.COMPILE_GRAPH,
    Variant.GRAPH_NO_CLONE: Family.GRAPH, Variant.ALLOCATING: Family.EAGER,
}

# The labels a workload's baseline carries: what every other method is measured against.
BASELINES: tuple[str, ...] = (Method.EAGER, Variant.ALLOCATING)


def family(method: object) -> str:
    """The family of a method or variant; a label the lab does not declare keeps its own name."""
    return FAMILY.get(str(method), str(method))


# The order in which tables and charts list methods: from the step as written to the most transformed.
METHOD_ORDER: tuple[str, ...] = tuple(m.value for m in Method)


def method_rank(name: object) -> tuple[int, str]:
    """Sort key: declared methods in METHOD_ORDER, anything else after them by name."""
    return (METHOD_ORDER.index(name) if name in METHOD_ORDER else len(METHOD_ORDER), str(name))


# The methods that torch.compile the step: lab.step.methods' rows with compiled=True, declared here for the readers
# that run without torch (the report, `lab headline`); tests/test_methods.py holds the two equal.
COMPILED: tuple[str, ...] = (Method.COMPILE_DEFAULT, Method.REDUCE_OVERHEAD, Method.REDUCE_OVERHEAD_STATIC,
                             Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COMBO, Method.COMPILE_GRAPH_PDL,
                             Method.COMPILE_GRAPH_COORDESC, Method.MAX_AUTOTUNE, Method.MAX_AUTOTUNE_GRAPH)


def is_compiled(method: object) -> bool:
    """Whether the method torch.compiles the step (a method of COMPILED); a label the lab does not declare is not."""
    return str(method) in COMPILED


def is_eager(method: object) -> bool:
    """Eager, or an eager variant named after it (inductor's 'eager-split' in runs of earlier lab versions)."""
    return str(method) == Method.EAGER or str(method).startswith(f"{Method.EAGER}-")


class Experiment(StrEnum):
    """The catalogue's ids (lab.contract.catalogue, which a test holds to this list): a `str`, so results.json
    is unchanged and a record's `id` compares equal to its member."""

    SENTINEL = "sentinel"
    TOOLCHAIN = "toolchain"
    GRAPH_BREAKS = "graph_breaks"
    RECOMPILES = "recompiles"
    DECODE_RECOMPILES = "decode_recompiles"
    FIXED_STEP_EQUIVALENCE = "fixed_step_equivalence"
    CUDA_GRAPH_DECODE = "cuda_graph_decode"
    COMPILE_TUNING = "compile_tuning"
    GRAPH_COST = "graph_cost"
    GRAPH_HAZARDS = "graph_hazards"
    CEILINGS = "ceilings"
    INDUCTOR = "inductor"
    COMPILE_COST = "compile_cost"
    GRAPH_BREAK_REPAIR = "graph_break_repair"
    MANUAL_GRAPH_RECIPE = "manual_graph_recipe"
    FUSION = "fusion"
    LAUNCH_OVERHEAD = "launch_overhead"
    ALLOCATION = "allocation"
    GEMM_BOUND = "gemm_bound"
    AMDAHL = "amdahl"
    DIAGNOSE = "diagnose"
    SELECTION = "selection"
    PEER_GENERATE = "peer_generate"
    MODEL_SCALING = "model_scaling"
    CONTEXT_SCALING = "context_scaling"
    GRAPH_BUCKETS = "graph_buckets"
    DATA_DEPENDENT_BRANCH = "data_dependent_branch"
    FUSED_ANATOMY = "fused_anatomy"
    FUSED_PERSISTENT = "fused_persistent"
    SENTINEL_END = "sentinel_end"


class Status(StrEnum):
    """A record's status (lab.contract.results.Record.status)."""

    OK = "OK"
    NOT_RUN = "NOT_RUN"  # prerequisites missing
    FAILED = "FAILED"  # raised, or a fatal correctness check failed


class Param(StrEnum):
    """The names of a metric's params that readers select by (a metric's `params` keys). Params named by a
    generic word (name, device, source, n, k, bytes, calls, rows) are not declared yet: a scan cannot tell them
    from the same word as a field of a manifest, a lock or a note (issue 28)."""

    METHOD = "method"
    BATCH = "batch"
    DTYPE = "dtype"
    READBACK = "readback"
    STEP = "step"
    SIZE = "size"
    PHASE = "phase"
    TARGET = "target"
    WORKLOAD = "workload"
    MODE = "mode"
    WHEN = "when"
    N_OPS = "n_ops"
    LADDER = "ladder"
    KIND = "kind"
    VARIANT = "variant"
    RESIDENCY = "residency"
    CASE = "case"
    MAX_LEN = "max_len"
    FILL = "fill"
    BUCKET = "bucket"
    IMPL = "impl"
    DYNAMIC = "dynamic"
    VERSION = "version"
    FUNCTION = "function"
    N_LAYER = "n_layer"
    STEPS = "steps"
    TRIAL = "trial"
    SETTING = "setting"
    PEER = "peer"
    FULLGRAPH = "fullgraph"
    HAZARD = "hazard"
    MAX_BATCH = "max_batch"
    DIM = "dim"
    SMALLEST = "smallest"
    LARGEST = "largest"
    REMOVED_BY = "removed_by"
