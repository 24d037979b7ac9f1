"""Why it moved: the manifest fields that can explain a move, ranked by what can explain the moved figure's class.

A figure's class says where its time is spent, so which fields to check first (`figure_class`):
- `dispatch`: eager and launch-bound figures (eager's step, the cost of one launch, speedups and savings
  over eager, and any figure whose `binding` in ceilings is `launch`): the host's speed first, as the two
  runs measured it (their host-speed index, lab.measure.hostspeed: the median of every round's and its
  p5-p95), then where the run ran (the CPU binding, the GPU's NUMA node), then the cost of one eager
  launch (the manifest's `host_dispatch.launch_us_per_op`, the ceilings' measurement), then the rest
  of the manifest's `host_dispatch` {cpu_model, cpu_mhz, load_start, load_end} (older runs record
  cpu.model and host.load_start / load_end only: those are read instead);
- `kernel`: kernel-bound figures (graph / compiled / fused steps, bandwidth, TFLOP/s, MBU, GPU-busy
  time): the GPU, driver, torch, CUDA and Triton first;
- `other`: neither (compile times, counts...): the fields in the order of EXPLAIN.
Within a ranking, the fields that differ and both runs record come first (the class's own fields, then
the others), then those only one run records (a field the older run lacks explains nothing by itself),
then those that agree (`explain`). The measured rows (`MEASURED`) come from the runs' results, the
others from their manifests.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Literal

from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract.names import Experiment, Method, is_eager, Param as P
from lab.contract.results import Results

__all__ = ["ABSENT", "CLASSES", "EXPLAIN", "FIRST", "MEASURED", "ExplainRow", "FigureClass", "explain", "figure_class", "flatten"]

ABSENT = "(absent)"
FigureClass = Literal["dispatch", "kernel", "other"]
CLASSES: dict[str, str] = {"dispatch": "eager and launch-bound figures: the host's dispatch first",
                           "kernel": "kernel-bound figures: the GPU, driver, torch, CUDA and Triton first",
                           "other": "other figures"}

# What can explain a move, in the order a performance engineer checks it: (label, keys); each side's value is that
# of the first key it records (the dispatch fields of host_dispatch, else where older runs kept them); a key
# ending in "." is a group of fields.
EXPLAIN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GPU", ("gpu.nvidia_smi.gpus[0].name",)), ("GPU seen by torch", ("gpu.torch.device_name",)),
    ("the card (UUID)", ("gpu.nvidia_smi.gpus[0].uuid",)),
    ("driver", ("gpu.nvidia_smi.gpus[0].driver_version",)), ("torch", ("torch.version",)),
    ("CUDA", ("torch.cuda_build",)), ("cuDNN", ("torch.cudnn",)), ("Triton", ("libraries.triton",)),
    ("Python", ("python.version",)), ("transformers", ("libraries.transformers",)), ("numpy", ("libraries.numpy",)),
    ("C++ compiler", ("toolchain.cxx.version",)), ("CPU", ("host_dispatch.cpu_model", "cpu.model")),
    ("CPU clock (MHz)", ("host_dispatch.cpu_mhz",)),
    ("eager launch, measured clean (µs)", ("host_dispatch.launch_us_per_op",)),
    ("CPU binding (LAB_CPU_BIND)", ("host_dispatch.placement.bind",)),
    ("the GPU's NUMA node", ("host_dispatch.placement.gpu_node",)),
    ("CPU flags", ("cpu.isa",)), ("CPU flags digest", ("cpu.flags_sha256",)), ("CPU caches", ("cpu.caches.",)),
    ("cores usable", ("cpu.usable_cores",)), ("torch threads", ("cpu.torch_threads",)),
    ("host load at start", ("host_dispatch.load_start", "host.load_start")),
    ("host load at end", ("host_dispatch.load_end", "host.load_end")),
    ("GPU SM clock", ("gpu.nvidia_smi.gpus[0].clocks.sm",)), ("GPU max SM clock", ("gpu.nvidia_smi.gpus[0].clocks.max.sm",)),
    ("GPU memory clock", ("gpu.nvidia_smi.gpus[0].clocks.mem",)),
    ("GPU power limit", ("gpu.nvidia_smi.gpus[0].power.limit",)),
    ("GPU persistence mode", ("gpu.nvidia_smi.gpus[0].persistence_mode",)),
    ("in a container", ("container.in_container",)), ("image", ("container.image",)),
    ("image variant", ("container.variant",)), ("image id", ("container.image_id",)),
    ("packages digest", ("packages.sha256",)), ("compile cache at start", ("compile_cache.state",)),
    ("Inductor settings", ("compiler_settings.inductor.",)), ("Dynamo settings", ("compiler_settings.dynamo.",)),
    ("lab commit", ("lab.commit",)),
)

# The fields each class checks first, in this order (labels of EXPLAIN).
FIRST: dict[str, tuple[str, ...]] = {
    "dispatch": ("host-speed index (ms)", "CPU binding (LAB_CPU_BIND)", "the GPU's NUMA node",
                 "eager launch, measured clean (µs)", "eager launch, ceilings (µs)", "CPU", "CPU clock (MHz)",
                 "host load at start", "host load at end", "torch threads", "cores usable"),
    "kernel": ("GPU", "GPU seen by torch", "the card (UUID)", "driver", "torch", "CUDA", "Triton", "GPU SM clock", "GPU max SM clock",
               "GPU memory clock", "GPU power limit"),
    "other": (),
}

# Figures whose class follows from their name alone; the others follow from their method and binding.
_DISPATCH = frozenset(s.name for s in (
    M.LAUNCH_US_PER_OP, M.LAUNCH_US_PER_OP_SAMPLES, M.US_PER_OP, M.US_PER_OP_REMOVED, M.SPEEDUP_VS_EAGER, M.SPEEDUP,
    M.SPEEDUP_CI_LOW, M.SPEEDUP_CI_HIGH, M.SAVING_MS_PER_STEP, M.SAVING_MS_PER_CALL, M.BREAK_EVEN_STEPS,
    M.MEASURED_SPEEDUP, M.IN_RUN_OVER_SENTINEL, M.BOUND_LAUNCH_MS, M.SPEEDUP_VS_BROKEN_EAGER, M.EMPTY_MS,
    M.US_PER_EMPTY, M.US_PER_INTERMEDIATE, M.SPEEDUP_AT_REFERENCE, M.IN_RUN_OVER_FRESH, M.IN_RUN_CHANGE,
    M.HOST_SENSITIVITY, M.HOST_INDEX_MS))
_KERNEL = frozenset(s.name for s in (
    M.BANDWIDTH_GBPS, M.BANDWIDTH_GBPS_SAMPLES, M.MATMUL_TFLOPS, M.MATMUL_TFLOPS_SAMPLES, M.ACHIEVED_GBPS,
    M.ACHIEVED_TFLOPS, M.MBU, M.GPU_BUSY_US, M.KERNEL_TIME_PER_STEP_US, M.BOUND_BANDWIDTH_MS, M.BOUND_COMPUTE_MS))
_STEP = frozenset(s.name for s in (M.STEP_MS, M.SENTINEL_STEP_MS, M.STEADY_MS, M.MEASURED_MS, M.MEASURED_OVER_BOUND,
                                   M.GAP_US, M.BOUND_MS, M.STEP_MS_AT_REFERENCE))


def figure_class(name: str, params: dict[str, Any], binding: str | None = None) -> FigureClass:
    """The class of a figure (the module docstring): `binding` is ceilings' binding for its method, batch and dtype
    (None where ceilings bounded no such step)."""
    if binding == "launch" or name in _DISPATCH:
        return "dispatch"
    if name in _STEP and P.METHOD in params:
        return "dispatch" if is_eager(params[P.METHOD]) else "kernel"
    return "kernel" if name in _KERNEL else "other"


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as dotted keys: {'gpu': {'gpus': [{'name': 'H200'}]}} -> {'gpu.gpus[0].name': 'H200'}."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(obj, list) and obj and any(isinstance(v, (dict, list)) for v in obj):
        for i, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = obj
    return out


@dataclass(frozen=True)
class ExplainRow:
    label: str
    key: str
    a: Any
    b: Any
    first: bool = False  # one of the fields the moved figure's class checks first

    @property
    def differs(self) -> bool:
        return bool(self.a != self.b)


def _pick(flat: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    """The first key recorded with a value, else the first recorded as null, else (None, ABSENT)."""
    key = next((k for k in keys if flat.get(k) is not None), None) or next((k for k in keys if k in flat), None)
    return (None, ABSENT) if key is None else (key, flat[key])


def _index_text(results: Results) -> Any:
    """The run's host-speed index: the median of every round's, with its p5-p95 (ABSENT: the run has none)."""
    xs = sorted(float(x) for rec in results.experiments for m in rec.metrics if m.name == M.HOST_INDEX_MS.name
                and isinstance(m.value, list) for x in m.value if isinstance(x, (int, float)))
    if not xs:
        return ABSENT
    def at(q: float) -> float:
        return xs[max(0, math.ceil(q * len(xs)) - 1)]
    return f"{statistics.median(xs):.3g} (p5-p95 {at(0.05):.3g}-{at(0.95):.3g})"


def _launch(results: Results) -> Any:
    """The cost of one eager launch as ceilings measured it in the run (ABSENT: not measured)."""
    m = q.maybe(q.experiment(results, Experiment.CEILINGS), M.LAUNCH_US_PER_OP, mode=Method.EAGER)
    return ABSENT if m is None else m.value


# What the runs measured that can explain a move (from their results, not their manifests).
MEASURED: tuple[tuple[str, str, Callable[[Results], Any]], ...] = (
    ("host-speed index (ms)", "metric:host_index_ms", _index_text),
    ("eager launch, ceilings (µs)", "metric:ceilings.launch_us_per_op", _launch),
)


def explain(a: dict[str, Any], b: dict[str, Any], cls: str = "other", a_results: Results | None = None,
            b_results: Results | None = None) -> list[ExplainRow]:
    """The fields that can explain a move (MEASURED from the runs' results where given, EXPLAIN from their
    manifests), ranked for a figure of class `cls`: those that differ first (the class's own fields, FIRST, in their
    order, then the others; those both runs record before those only one does), then those that do not."""
    fa, fb = flatten(a), flatten(b)
    first = FIRST.get(cls, ())
    measured = [(label, key, get(a_results), get(b_results)) for label, key, get in MEASURED] \
        if a_results is not None and b_results is not None else []
    rows = [ExplainRow(label, key, va, vb, label in first) for label, key, va, vb in measured
            if va is not ABSENT or vb is not ABSENT]
    for label, keys in EXPLAIN:
        if not keys[0].endswith("."):
            ka, va = _pick(fa, keys)
            kb, vb = _pick(fb, keys)
            if ka is not None or kb is not None:
                rows.append(ExplainRow(label, kb or ka or keys[0], va, vb, label in first))
            continue
        prefix = keys[0]
        group = [ExplainRow(f"{label}: {k[len(prefix):]}", k, fa.get(k, ABSENT), fb.get(k, ABSENT), label in first)
                 for k in sorted(k for k in set(fa) | set(fb) if k.startswith(prefix))]
        moved = [r for r in group if r.differs]
        if moved:
            rows += moved
        elif group:  # a group of settings that all agree: one row
            rows.append(ExplainRow(label, prefix + "*", f"{len(group)} fields", f"{len(group)} fields", label in first))

    def rank(r: ExplainRow) -> tuple[int, int]:
        base = r.label.split(": ", 1)[0]
        one_sided = ABSENT in (r.a, r.b)
        return (2 if not r.differs else 1 if one_sided else 0), (first.index(base) if base in first else len(first))

    return sorted(rows, key=rank)  # stable: EXPLAIN's order within each rank
