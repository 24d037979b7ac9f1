"""The decode step as a reader first asks about it: which way of running it is fastest, by how much, and how
close to this host's ceilings. Only stored figures are shown: speedups, bounds, measured ÷ bound and MBU are
computed by the experiments (cuda_graph_decode, inductor, ceilings) and printed here as recorded.

The rows come from cuda_graph_decode where it ran (a GPU: every method, batch and dtype), else from inductor
(the CPU: eager against Inductor for the indexed and the split step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.contract import metrics as M
from lab.contract import units
from lab.contract.names import Method, method_rank
from lab.contract.results import Metric, Record, Results

from report.sections import Section, record, why_absent
from report.tables import Cell, Table, first, fmt, is_number, matching, num, params_text, sort_key, timing_cell

DECODE = "cuda_graph_decode"
INDUCTOR = "inductor"
CEILINGS = "ceilings"


def is_eager(method: Any) -> bool:
    """Eager, or an eager variant named after it (inductor's 'eager-split' in runs of earlier lab versions)."""
    return str(method) == Method.EAGER or str(method).startswith(f"{Method.EAGER}-")


@dataclass
class StepRow:
    """One stored step time with what the report shows beside it (all stored by the experiment)."""

    source: str  # the experiment id
    kind: str  # inductor's step ('indexed', 'split'); '' for cuda_graph_decode
    batch: Any
    dtype: str
    method: str
    step: Metric
    speedup: Metric | None  # speedup_vs_eager as stored (None for eager where none is stored)
    correct: bool | None  # tokens equal eager's (None: not checked for this method)

    @property
    def label(self) -> str:
        return f"{self.method} ({self.kind} step)" if self.kind and not self.method.endswith(self.kind) else self.method


@dataclass
class Case:
    """One batch and dtype: eager and the fastest method whose tokens equal eager's."""

    batch: Any
    dtype: str
    eager: StepRow
    best: StepRow


def _decode_rows(rec: Record) -> list[StepRow]:
    rows = []
    for m in matching(rec.metrics, M.STEP_MS, readback=False):
        p = m.params
        if "method" not in p or "batch" not in p or not is_number(m.value):
            continue
        eager = is_eager(p["method"])
        te = first(rec, M.TOKENS_EQUAL, method=p["method"], batch=p["batch"], dtype=p.get("dtype"))
        rows.append(StepRow(DECODE, "", p["batch"], str(p.get("dtype")), str(p["method"]), m,
                            first(rec, M.SPEEDUP_VS_EAGER, **p), True if eager else (te.value if te else None)))
    return rows


def _inductor_rows(rec: Record, dtype: str) -> list[StepRow]:
    rows = []
    for m in matching(rec.metrics, M.STEP_MS):
        p = m.params
        if "method" not in p or "step" not in p or not is_number(m.value):
            continue
        method = str(p["method"])
        speedups = [s for s in matching(rec.metrics, M.SPEEDUP_VS_EAGER, step=p["step"], batch=p.get("batch"))
                    if s.params.get("method", method) == method] if not is_eager(method) else []
        # inductor's tokens-equal checks are fatal: an OK record means the compiled steps matched eager
        rows.append(StepRow(INDUCTOR, str(p["step"]), p.get("batch", 1), dtype, method, m,
                            speedups[0] if speedups else None, rec.status == "OK"))
    return rows


def step_rows(results: Results) -> list[StepRow]:
    """The decode step's stored times: cuda_graph_decode's where it ran (OK, or FAILED by a fatal check of some case:
    the cases that passed were measured, and a method whose tokens differ from eager's is never the best), else
    inductor's."""
    cgd = record(results, DECODE)
    if cgd is not None and cgd.status in ("OK", "FAILED"):
        rows = _decode_rows(cgd)
        if rows:
            return rows
    ind = record(results, INDUCTOR)
    if ind is not None:
        dtype = str((results.manifest.get("profile") or {}).get("dtype") or "float32")
        return _inductor_rows(ind, dtype)
    return []


def cases(rows: list[StepRow]) -> list[Case]:
    """Per batch and dtype: eager, and the fastest method whose tokens equal eager's (eager itself if none is faster)."""
    out = []
    keys = sorted({(r.batch, r.dtype) for r in rows}, key=lambda k: (k[1] != "float32", k[1], sort_key(k[0])))
    for batch, dtype in keys:
        here = [r for r in rows if r.batch == batch and r.dtype == dtype]
        correct = [r for r in here if r.correct]
        if not correct:
            continue
        best = min(correct, key=lambda r: r.step.value)
        eagers = [r for r in here if is_eager(r.method) and r.kind == best.kind] or [r for r in here if
                                                                                     is_eager(r.method)]
        if eagers:
            out.append(Case(batch, dtype, eagers[0], best))
    return out


def ceiling(results: Results, spec: M.MetricSpec, row: StepRow) -> Metric | None:
    """A ceilings figure stored for this row's method, batch and dtype (None: not stored)."""
    if row.source != DECODE and not is_eager(row.method):
        return None  # ceilings bounds the eager step and cuda_graph_decode's methods only
    method = Method.EAGER if is_eager(row.method) else row.method
    return first(record(results, CEILINGS), spec, method=method, batch=row.batch, dtype=row.dtype)


def answer(results: Results, case: Case) -> str:
    """One line: the fastest correct method against eager, with its stored speedup, bound and MBU."""
    best, eager = case.best, case.eager
    text = f"B={fmt(case.batch)}, {case.dtype}: "
    if is_eager(best.method):
        return text + f"eager is the fastest correct method ({fmt(eager.step.value, units.MS)})"
    text += f"{best.label} {fmt(best.step.value, units.MS)} against eager {fmt(eager.step.value, units.MS)}"
    if best.speedup is not None:
        text += f": {fmt(best.speedup.value)}×"
    binding, mbu = ceiling(results, M.BINDING, best), ceiling(results, M.MBU, best)
    extra = [f"{binding.value}-bound" if binding else "", f"MBU {fmt(mbu.value)}" if mbu else ""]
    return text + (f" ({', '.join(e for e in extra if e)})" if any(extra) else "")


def _best_table(results: Results, found: list[Case]) -> Table:
    table = Table(columns=["batch", "dtype", "eager step", "fastest correct method", "its step", "speedup (stored)",
                           "MBU", "binding bound"], caption="Eager against the fastest method whose tokens equal "
                                                           "eager's, per batch and dtype", id="best-table")
    for c in found:
        binding, whose = ceiling(results, M.BINDING, c.best), ""
        if binding is None and c.best is not c.eager:
            binding, whose = ceiling(results, M.BINDING, c.eager), " (eager)"
        mbu = ceiling(results, M.MBU, c.best)
        table.rows.append([Cell(fmt(c.batch), cls="num"), Cell(c.dtype), timing_cell(c.eager.step),
                           Cell(c.best.label), timing_cell(c.best.step),
                           num(c.best.speedup.value if c.best.speedup else None, units.X if c.best.speedup else ""),
                           num(mbu.value if mbu else None),
                           Cell(f"{binding.value}{whose}" if binding else "—")])
    return table


def _decode_tables(rec: Record) -> list[Table]:
    """cuda_graph_decode: method × batch per dtype and readback, each cell the median, stored speedup, spread."""
    steps = [m for m in matching(rec.metrics, M.STEP_MS) if "method" in m.params and "batch" in m.params]
    groups: dict[tuple[str, bool], list[Metric]] = {}
    for m in steps:
        groups.setdefault((str(m.params.get("dtype")), bool(m.params.get("readback"))), []).append(m)
    tables = []
    for (dtype, readback), metrics in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] != "float32",
                                                                              kv[0][0])):
        batches = sorted({m.params["batch"] for m in metrics}, key=sort_key)
        methods = sorted({m.params["method"] for m in metrics}, key=method_rank)
        table = Table(columns=["method"] + [f"batch {b}" for b in batches], cls="speedup", collapsed=readback,
                      caption=f"Median ms per decode step, dtype {dtype}, "
                              f"{'reading the token back each step' if readback else 'no readback'}")
        for method in methods:
            row = [Cell(str(method))]
            for b in batches:
                here = [m for m in metrics if m.params["method"] == method and m.params["batch"] == b]
                if not here:
                    row.append(Cell("—"))
                    continue
                sp = first(rec, M.SPEEDUP_VS_EAGER, **here[0].params)
                cell = timing_cell(here[0], extra=f"{fmt(sp.value)}× vs eager" if sp else "")
                if sp is not None and is_number(sp.value):
                    cell.cls += " good" if sp.value > 1.05 else (" bad" if sp.value < 0.95 else "")
                row.append(cell)
            table.rows.append(row)
        tables.append(table)
    return tables


def _inductor_table(results: Results, rows: list[StepRow]) -> Table:
    rec = record(results, INDUCTOR)
    table = Table(columns=["step", "batch", "method", "median step", "speedup vs eager (stored)", "compile (setup)"],
                  caption="Inductor on the CPU: the decode step eager and compiled (inductor)", id="inductor-table")
    for r in sorted(rows, key=lambda r: (r.kind, sort_key(r.batch), not is_eager(r.method))):
        setups = [] if is_eager(r.method) else [s for s in matching(rec.metrics if rec else [], M.SETUP_S, step=r.kind)
                                                 if s.params.get("method", r.method) == r.method]
        table.rows.append([Cell(r.kind), Cell(fmt(r.batch), cls="num"), Cell(r.method), timing_cell(r.step),
                           num(r.speedup.value if r.speedup else None, units.X if r.speedup else ""),
                           num(setups[0].value if setups else None, units.S if setups else "")])
    return table


def _ceilings_own_steps(results: Results) -> Table:
    rec = record(results, CEILINGS)
    table = Table(columns=["method", "batch", "dtype", "median step"], caption="The eager decode step timed by "
                  "ceilings at every batch of the profile (ceilings)")
    for m in matching(rec.metrics if rec else [], M.STEP_MS):
        table.rows.append([Cell(str(m.params.get("method"))), Cell(fmt(m.params.get("batch")), cls="num"),
                           Cell(fmt(m.params.get("dtype"))), timing_cell(m)])
    return table


def steps(results: Results) -> Section:
    rows = step_rows(results)
    found = cases(rows)
    tables: list[Table] = [_best_table(results, found)] if found else []
    if rows and rows[0].source == DECODE:
        tables += _decode_tables(record(results, DECODE))
        source = ("cuda_graph_decode: each cell the median step time, its stored speedup over eager at the same batch, "
                  "and the spread (IQR as a share of the median; ⚠ over 10%).")
    elif rows:
        tables.append(_inductor_table(results, rows))
        source = "No GPU in this run: the decode step as the CPU experiments timed it, eager against Inductor."
    else:
        source = ""
    own = _ceilings_own_steps(results)
    if own:
        tables.append(own)
    lines = [answer(results, c) for c in found]
    intro = "\n".join(lines + ([source] if source else []))
    return Section("steps", "Step time: the fastest correct method", intro, tables,
                   empty="" if tables else why_absent(results, DECODE, INDUCTOR))


# ---------------------------------------------------------------------------- ceilings

def _bounds_row(rec: Record, dtype: Any, method: Any, batch: Any) -> list[Cell]:
    p = {"method": method, "batch": batch} | ({"dtype": dtype} if dtype is not None else {})

    def get(spec: M.MetricSpec) -> Metric | None:
        return first(rec, spec, **p)

    binding = get(M.BINDING)
    nbytes = get(M.BYTES_PER_STEP)
    row = [Cell(fmt(dtype)), Cell(str(method)), Cell(fmt(batch), cls="num"),
           num(get(M.KERNELS_PER_STEP).value if get(M.KERNELS_PER_STEP) else None),
           num(nbytes.value / 1e6 if nbytes and is_number(nbytes.value) else None)]
    for kind, spec in (("launch", M.BOUND_LAUNCH_MS), ("bandwidth", M.BOUND_BANDWIDTH_MS),
                       ("compute", M.BOUND_COMPUTE_MS)):
        m = get(spec)
        binds = binding is not None and binding.value == kind
        row.append(num(m.value if m else None, units.MS, cls="num binds" if binds else "num"))
    row.append(Cell(fmt(binding.value) if binding else "—", cls="binds" if binding else ""))
    for spec in (M.MEASURED_MS, M.MEASURED_OVER_BOUND, M.ACHIEVED_GBPS, M.MBU):
        m = get(spec)
        row.append(num(m.value if m else None, m.unit if m else ""))
    return row


BOUNDS_COLUMNS = ["dtype", "method", "batch", "kernels/step", "MB/step", "launch bound", "bandwidth bound",
                  "compute bound", "binds", "measured", "measured / bound", "achieved", "MBU"]


def ceilings(results: Results) -> Section:
    rec = record(results, CEILINGS)
    host = Table(columns=["ceiling", "params", "value"], caption="Ceilings measured on this host")
    for spec in (M.LAUNCH_US_PER_OP, M.BANDWIDTH_GBPS, M.MATMUL_TFLOPS):
        for m in matching(rec.metrics if rec else [], spec):
            host.rows.append([Cell(spec.name), Cell(params_text(m.params)), num(m.value, m.unit)])
    keys = {(m.params.get("dtype"), m.params["method"], m.params["batch"]) for m in (rec.metrics if rec else [])
            if m.name == M.BOUND_MS.name and "method" in m.params and "batch" in m.params}
    order = sorted(keys, key=lambda k: (str(k[0]) != "float32", str(k[0]), method_rank(k[1]), sort_key(k[2])))
    found = cases(step_rows(results))
    summary = Table(columns=BOUNDS_COLUMNS, caption="Eager and the fastest correct method: which bound binds, how far "
                    "the step is from it, and the share of the weight-read floor reached (MBU)", id="bounds-summary")
    full = Table(columns=BOUNDS_COLUMNS, caption="Every method and batch: the three lower bounds on a step",
                 id="bounds-table", collapsed=bool(found))
    shown = set()
    for c in found:
        for r in (c.eager, c.best):
            key = (r.dtype, Method.EAGER if is_eager(r.method) else r.method, r.batch)
            if key in keys and key not in shown:
                shown.add(key)
                summary.rows.append(_bounds_row(rec, *key))
    for key in order:
        full.rows.append(_bounds_row(rec, *key))
    lines = []
    for c in found:
        for r in ([c.eager] if c.best is c.eager else [c.eager, c.best]):
            binding, ratio, bound = (ceiling(results, s, r) for s in (M.BINDING, M.MEASURED_OVER_BOUND, M.BOUND_MS))
            if binding and ratio and bound:
                lines.append(f"B={fmt(c.batch)}, {c.dtype}, {r.label}: {binding.value}-bound; the measured step is "
                             f"{fmt(ratio.value)}× its {fmt(bound.value, units.MS)} bound")
    lines.append("A step cannot be faster than its largest bound: launches × cost per launch, bytes ÷ bandwidth, "
                 "FLOPs ÷ peak. The bound that binds is highlighted.")
    tables = [t for t in (summary, host, full) if t]
    return Section("ceilings", "Ceilings and which bound binds", "\n".join(lines), tables,
                   empty="" if tables else why_absent(results, CEILINGS))
