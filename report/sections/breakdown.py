"""Where a decode step's time goes, per method and batch: the weight-read floor, the rest of the GPU-busy time,
and the gaps in which no kernel runs; the kernels that take it; and how the steps' times spread.

All stored figures: cuda_graph_decode's `step_ms` (no readback), `gpu_busy_us`, `gap_us` (the step minus the
GPU-busy time), the method's MBU (report.sections.steps.stored_mbu), the `top_kernels.<method>.b<batch>.<dtype>` notes
and the raw step samples; the floor is ceilings' `bound_bandwidth_ms` (the bytes a step must read, `bytes_per_step`,
at the measured copy bandwidth), not shown where a stored step of the method is below it (steps.bound_of).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract import units
from lab.contract.names import Experiment, method_rank, Param as P
from lab.contract.results import Metric, Record, Results

from report.sections import fused_kernels, fused_layouts
from report.sections.steps import bound_of, cases, floor_ms, pct, step_rows, stored_mbu
from report.draw.style import display
from report.draw.tables import Cell, Table, fmt, is_number, num, sort_key

TOP_SHOWN = 5  # kernels per method in the table (the note keeps 8)


@dataclass
class Split:
    """One method, batch and dtype: its step and what it is made of (ms), as stored."""

    method: str
    batch: Any
    dtype: str
    step_ms: float
    busy_us: float | None
    gap_us: float | None
    floor_ms: float | None
    floor_note: str  # why no floor is shown, where one is stored
    mbu: Metric | None

    @property
    def parts(self) -> dict[str, float] | None:
        """The stacked bar's three parts in ms: the floor (within the GPU-busy time), the rest of the busy time,
        the gap. None where the step was not profiled."""
        if self.busy_us is None or self.gap_us is None:
            return None
        busy = self.busy_us / 1e3
        floor = min(self.floor_ms, busy) if self.floor_ms is not None else 0.0
        return {"floor": floor, "above": busy - floor, "gap": max(self.gap_us / 1e3, 0.0)}


def splits(results: Results) -> list[Split]:
    """Every method, batch and dtype cuda_graph_decode timed without readback, in table order."""
    rec = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    out = []
    for m in q.all(rec, M.STEP_MS, readback=False):
        p = {k: m.params.get(k) for k in (P.METHOD, P.BATCH, P.DTYPE)}
        if p[P.METHOD] is None or not is_number(m.value):
            continue
        busy, gap = q.maybe(rec, M.GPU_BUSY_US, **p), q.maybe(rec, M.GAP_US, **p)
        floor = floor_ms(results, p[P.BATCH], str(p[P.DTYPE]), str(p[P.METHOD]))
        bound = bound_of(results.experiments, str(p[P.METHOD]), p[P.BATCH], p[P.DTYPE])
        shown = floor if bound.allows(floor) else None
        out.append(Split(str(p[P.METHOD]), p[P.BATCH], str(p[P.DTYPE]), float(m.value),
                         busy.value if busy and is_number(busy.value) else None,
                         gap.value if gap and is_number(gap.value) else None, shown,
                         "" if shown == floor else f"not meaningful: {fmt(floor, units.MS)}, above a stored step of it",
                         stored_mbu(results.experiments, str(p[P.METHOD]), p[P.BATCH], p[P.DTYPE], m.value)))
    return sorted(out, key=lambda s: (s.dtype != "float32", s.dtype, sort_key(s.batch), method_rank(s.method)))


def groups(found: list[Split]) -> list[tuple[str, Any, list[Split]]]:
    """(dtype, batch, its splits), fp32 first, batches ascending."""
    keys = list(dict.fromkeys((s.dtype, s.batch) for s in found))
    return [(d, b, [s for s in found if (s.dtype, s.batch) == (d, b)]) for d, b in keys]


def floor_table(found: list[Split]) -> Table:
    table = Table(columns=["batch", "dtype", "method", "floor", "GPU-busy", "gap", "step", "MBU"],
                  id="floor-table", caption="Distance to the floor: the weight-read floor (bytes_per_step at the "
                  "measured copy bandwidth), the GPU-busy time, the gaps and the step (cuda_graph_decode, ceilings)")
    for s in found:
        table.rows.append([Cell(fmt(s.batch), cls="num"), Cell(s.dtype), Cell(display(s.method)),
                           num(s.floor_ms, units.MS, title=s.floor_note), num(s.busy_us, units.US),
                           num(s.gap_us, units.US), num(s.step_ms, units.MS),
                           Cell(pct(s.mbu.value) if s.mbu else "—", cls="num")])
    return table


def top_kernels(rec: Record | None) -> dict[tuple[Any, str], dict[str, list[dict[str, Any]]]]:
    """(batch, dtype) -> method -> the kernels that took the most GPU time, from the notes."""
    out: dict[tuple[Any, str], dict[str, list[dict[str, Any]]]] = {}
    for key, value in (rec.notes if rec else {}).items():
        found = N.TOP_KERNELS.parse(key)
        shape = (found or {}).get("shape", "").split(".")
        if found is None or not isinstance(value, list) or len(shape) != 2 or not shape[0].startswith("b"):
            continue
        method, (b, dtype) = found[P.METHOD], shape
        batch: Any = int(b[1:]) if b[1:].isdigit() else b[1:]
        out.setdefault((batch, dtype), {})[method] = [k for k in value if isinstance(k, dict)]
    return out


def kernel_tables(results: Results) -> list[Table]:
    """One table per batch and dtype: each method's top kernels with count, GPU time and share of its busy time;
    then the hand-fused step kernel by kernel (report.sections.fused_kernels: time, bytes, achieved bandwidth, the fit) and how
    its gemm path called the library (report.sections.fused_layouts)."""
    rec = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    tables = []
    for i, ((batch, dtype), per_method) in enumerate(sorted(top_kernels(rec).items(), key=lambda kv: (
            kv[0][1] != "float32", kv[0][1], sort_key(kv[0][0])))):
        table = Table(columns=["method", "#", "kernel", "calls", "GPU time", "share of GPU-busy"],
                      caption=f"Top kernels of each method, batch {fmt(batch)}, {dtype} (profiler, one step)",
                      id=f"top-kernels-b{batch}-{dtype}", cls="kernels", collapsed=i > 0)
        for method in sorted(per_method, key=method_rank):
            busy = q.maybe(rec, M.GPU_BUSY_US, method=method, batch=batch, dtype=dtype)
            for rank, k in enumerate(per_method[method][:TOP_SHOWN], 1):
                us = k.get("us")
                share = us / busy.value if busy and is_number(busy.value) and busy.value and is_number(us) else None
                table.rows.append([Cell(display(method) if rank == 1 else ""), Cell(str(rank), cls="num"),
                                   Cell(str(k.get("name", "?")), cls="kernel"), num(k.get("count")),
                                   num(us, units.US), Cell(pct(share), cls="num")])
        tables.append(table)
    return tables + fused_kernels.tables(results) + fused_layouts.tables(results)


def samples(results: Results) -> dict[tuple[Any, str], dict[str, list[float]]]:
    """(batch, dtype) -> method -> the stored per-step samples of its step (no readback)."""
    rec = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    out: dict[tuple[Any, str], dict[str, list[float]]] = {}
    for s in rec.samples if rec else []:
        p = s.params
        if s.name == M.STEP_MS.name and p.get(P.READBACK) is False and P.METHOD in p and s.values:
            out.setdefault((p.get(P.BATCH), str(p.get(P.DTYPE))), {})[str(p[P.METHOD])] = list(s.values)
    return out


def answer(results: Results, found: list[Split]) -> str:
    """One line per batch and dtype for the fastest correct method: what its step is made of."""
    lines = []
    by_key = {(s.method, s.batch, s.dtype): s for s in found}
    for c in cases(step_rows(results)):
        s = by_key.get((c.best.method, c.batch, c.dtype))
        if s is None or s.busy_us is None or s.gap_us is None:
            continue
        floor = f"the floor {fmt(s.floor_ms, units.MS)} of it" if s.floor_ms is not None else "no floor shown"
        lines.append(f"B={fmt(c.batch)}, {c.dtype}, {display(s.method)}: step {fmt(s.step_ms, units.MS)}, GPU-busy "
                     f"{fmt(s.busy_us, units.US)} ({floor}), gaps {fmt(s.gap_us, units.US)}"
                     + (" (the kernels' busy time exceeds the step)" if s.gap_us < 0 else "")
                     + (f", MBU {pct(s.mbu.value)}" if s.mbu else ""))
    return "\n".join(lines)
