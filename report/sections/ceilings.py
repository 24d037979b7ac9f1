"""The ceilings section: this host's launch, bandwidth and compute ceilings and, for eager and every method
cuda_graph_decode timed, the three lower bounds on its step, which binds and how far the step is from it.

All as ceilings stored them, except MBU, the method's own (report.sections.steps.stored_mbu: the one value every page
and `lab headline` print). A bound above a step time the run stored for that method, batch and dtype is not shown as a
bound: its cell and its sentence say it is not meaningful, and why (report.sections.steps.bound_of).
"""

from __future__ import annotations

from typing import Any

from lab.contract import metrics as M
from lab.contract import query as q
from lab.contract import units
from lab.contract.names import Experiment, Method, is_eager, method_rank, Param as P
from lab.contract.results import Record, Results

from report.draw.tables import Cell, Table, fmt, is_number, num, params_text, sort_key, value_cell
from report.sections.section import Section, shown, why_absent
from report.sections.steps import bound_of, cases, pct, row_bound, step_rows, stored_mbu

COLUMNS = ["dtype", "method", "batch", "kernels/step", "MB/step", "launch bound", "bandwidth bound",
           "compute bound", "binds", "measured", "measured / bound", "achieved", "MBU"]


def _row(results: Results, rec: Record | None, dtype: Any, method: Any, batch: Any) -> list[Cell]:
    p = {P.METHOD: method, P.BATCH: batch} | ({P.DTYPE: dtype} if dtype is not None else {})
    bound = bound_of(results.experiments, str(method), batch, dtype)
    kernels, nbytes = q.maybe(rec, M.KERNELS_PER_STEP, **p), q.maybe(rec, M.BYTES_PER_STEP, **p)
    row = [Cell(fmt(dtype)), Cell(str(method)), Cell(fmt(batch), cls="num"), value_cell(kernels, ""),
           num(nbytes.value / 1e6 if nbytes and is_number(nbytes.value) else None)]
    for kind, spec in (("launch", M.BOUND_LAUNCH_MS), ("bandwidth", M.BOUND_BANDWIDTH_MS),
                       ("compute", M.BOUND_COMPUTE_MS)):
        m = q.maybe(rec, spec, **p)
        binds = bound.binding is not None and bound.binding.value == kind and not bound.why_not
        row.append(value_cell(m, units.MS, cls="num binds" if binds else "num")
                   if m is None or bound.allows(m.value) else Cell("not meaningful", cls="muted", title=bound.text))
    cell = bound.cell()
    cell.cls = "binds" if bound.binding is not None and not bound.why_not else cell.cls
    measured, achieved = q.maybe(rec, M.MEASURED_MS, **p), q.maybe(rec, M.ACHIEVED_GBPS, **p)
    ratio = None if bound.why_not else bound.ratio
    mbu = stored_mbu(results.experiments, str(method), batch, dtype, measured.value if measured else None)
    return row + [cell, value_cell(measured), value_cell(ratio), value_cell(achieved),
                  Cell(pct(mbu.value) if mbu else "—", cls="num")]


def ceilings(results: Results) -> Section:
    rec = q.experiment(results, Experiment.CEILINGS)
    host = Table(columns=["ceiling", "params", "value"], caption="Ceilings measured on this host",
                 rows=[[Cell(spec.name), Cell(params_text(m.params)), num(m.value, m.unit)]
                       for spec in (M.LAUNCH_US_PER_OP, M.BANDWIDTH_GBPS, M.MATMUL_TFLOPS) for m in q.all(rec, spec)])
    keys: set[tuple[Any, Any, Any]] = {(m.params.get(P.DTYPE), m.params[P.METHOD], m.params[P.BATCH])
                                       for m in q.all(rec, M.BOUND_MS) if P.METHOD in m.params and P.BATCH in m.params}
    found = cases(step_rows(results))
    picked = dict.fromkeys((r.dtype, Method.EAGER if is_eager(r.method) else r.method, r.batch)
                           for c in found for r in (c.eager, c.best))
    summary = Table(columns=COLUMNS, caption="Eager and the fastest correct method: which bound binds, how far the "
                    "step is from it, and the share of the weight-read floor reached (MBU, the method's own)",
                    id="bounds-summary", rows=[_row(results, rec, *key) for key in picked if key in keys])
    full = Table(columns=COLUMNS, caption="Every method and batch: the three lower bounds on a step",
                 id="bounds-table", collapsed=bool(found), rows=[_row(results, rec, *key) for key in sorted(
                     keys, key=lambda k: (str(k[0]) != "float32", str(k[0]), method_rank(k[1]), sort_key(k[2])))])
    lines = []
    for c in found:
        for r in ([c.eager] if c.best is c.eager else [c.eager, c.best]):
            b, measured = row_bound(results, r), q.maybe(rec, M.MEASURED_MS, method=Method.EAGER if is_eager(
                r.method) else r.method, batch=r.batch, dtype=r.dtype)
            head = f"B={fmt(c.batch)}, {c.dtype}, {r.label}: "
            if b.why_not:
                lines.append(head + b.text)
            elif b.binding and b.ratio and b.bound and measured:
                lines.append(head + f"{b.binding.value}-bound; the measured step ({fmt(measured.value, units.MS)}) is "
                             f"{fmt(b.ratio.value)}× its {fmt(b.bound.value, units.MS)} bound")
    lines.append("A step cannot be faster than its largest bound: launches × cost per launch, bytes ÷ bandwidth, "
                 "FLOPs ÷ peak. The bound that binds is highlighted.")
    return shown(Experiment.CEILINGS, "Ceilings and which bound binds", "\n".join(lines), [summary, host, full],
                 why_absent(results, Experiment.CEILINGS))
