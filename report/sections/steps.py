"""The decode step as a reader first asks about it: which way of running it is fastest, by how much, and how
close to this host's ceilings. Only stored figures are shown: speedups, bounds, measured ÷ bound and MBU are
computed by the experiments (cuda_graph_decode, inductor, ceilings) and printed here as recorded.

The rows come from cuda_graph_decode where it ran (a GPU: every method, batch and dtype), else from inductor
(the CPU: eager against Inductor for the indexed and the split step), else from model_scaling (a sweep run: its
GPT-2 124M row at batch 1 in fp32, the decode step the other runs time).

"Fastest correct" selects by the `correct` metric the experiment stored (lab.step.correctness: exact tokens for
eager's kernels in fp32, teacher forcing otherwise); a run of an earlier lab version that stored none is judged
by its old rule, tokens equal to eager's. A method's MBU and binding bound are its own, one value wherever they are
shown (the run page, the front page, `lab headline`): `stored_mbu` (the `mbu` stored once for that method's own step
time: cuda_graph_decode's, ceilings' for a step it timed) and `bound_of` (ceilings' row for that method, "not
meaningful" where a stored step of it is below the bound); eager's figure is never shown for another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import units
from lab.contract.names import Experiment, Method, is_eager, method_rank, Param as P, Status
from lab.contract.results import Metric, Record, Results

from report.sections.section import Section, shown, why_absent
from report.draw.style import display
from report.draw.tables import Cell, Table, fmt, is_number, param_cells, sort_key, timing_cell, value_cell

SCALING_SIZE = "gpt2-124M"  # the sweep's row that is the decode step of the other runs


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
    correct: bool | None  # the stored `correct` (older runs: tokens equal eager's; None: not checked)
    ci: tuple[Any, Any] | None = None  # the stored 95% interval of the speedup (speedup_ci_low, speedup_ci_high)
    status: str = Status.OK  # the status of the record the figures come from (FAILED figures are badged)
    params: dict[str, Any] | None = None  # the params its own figures are stored under in `source`

    @property
    def label(self) -> str:
        return display(self.method, self.kind)

    @property
    def speedup_text(self) -> str:
        """'11.4×', with its stored interval where there is one: '11.4× [11.3, 11.5]'."""
        if self.speedup is None or not is_number(self.speedup.value):
            return ""
        text = f"{fmt(self.speedup.value)}×"
        if self.ci is not None and all(is_number(v) for v in self.ci):
            text += f" [{fmt(self.ci[0])}, {fmt(self.ci[1])}]"
        return text


def pct(value: Any) -> str:
    """A fraction as percent, three significant digits ('23.2%'); '—' where none."""
    return f"{fmt(value * 100)}%" if is_number(value) else "—"


def _correct(rec: Record, method: Any, **p: Any) -> bool | None:
    """The stored `correct` verdict; a run that stored none: eager is the reference, the others by tokens_equal."""
    found = q.maybe(rec, M.CORRECT, method=method, **p)
    if found is not None:
        return bool(found.value)
    if is_eager(method):
        return True
    te = q.maybe(rec, M.TOKENS_EQUAL, method=method, **p)
    return te.value if te else None


@dataclass
class Case:
    """One batch and dtype: eager and the fastest method whose tokens equal eager's."""

    batch: Any
    dtype: str
    eager: StepRow
    best: StepRow


def _decode_rows(rec: Record, **where: Any) -> list[StepRow]:
    """A record's step times per method, batch and dtype: cuda_graph_decode's, or model_scaling's at one size."""
    rows = []
    for m in q.all(rec, M.STEP_MS, **where):
        p = m.params
        if P.METHOD not in p or P.BATCH not in p or not is_number(m.value):
            continue
        own: dict[str, Any] = {k: p[k] for k in (P.METHOD, P.BATCH, P.DTYPE, P.SIZE) if k in p}
        rows.append(StepRow(rec.id, "", p[P.BATCH], str(p.get(P.DTYPE)), str(p[P.METHOD]), m,
                            q.maybe(rec, M.SPEEDUP_VS_EAGER, **p), _correct(rec, **own),
                            q.interval(rec, M.SPEEDUP_VS_EAGER, **p), rec.status, own))
    return rows


def _scaling_rows(rec: Record) -> list[StepRow]:
    """model_scaling's GPT-2 124M step at batch 1 in fp32 (the smallest size where 124M was not run)."""
    sizes = [m.params.get(P.SIZE) for m in q.all(rec, M.STEP_MS)]
    return _decode_rows(rec, size=SCALING_SIZE if SCALING_SIZE in sizes else (sizes[0] if sizes else None), batch=1,
                        dtype="float32")


def _inductor_rows(rec: Record, dtype: str) -> list[StepRow]:
    rows = []
    for m in q.all(rec, M.STEP_MS):
        p = m.params
        if P.METHOD not in p or P.STEP not in p or not is_number(m.value):
            continue
        method = str(p[P.METHOD])
        speedups = [s for s in q.all(rec, M.SPEEDUP_VS_EAGER, step=p[P.STEP], batch=p.get(P.BATCH))
                    if s.params.get(P.METHOD, method) == method] if not is_eager(method) else []
        # inductor's tokens-equal checks are fatal: an OK record means the compiled steps matched eager
        sp = speedups[0] if speedups else None
        rows.append(StepRow(Experiment.INDUCTOR, str(p[P.STEP]), p.get(P.BATCH, 1), dtype, method, m, sp, rec.status == Status.OK,
                            q.interval(rec, M.SPEEDUP_VS_EAGER, **sp.params) if sp else None, rec.status))
    return rows


def step_rows(results: Results) -> list[StepRow]:
    """The decode step's stored times: cuda_graph_decode's where it ran (OK, or FAILED by a fatal check of some case:
    the cases that passed were measured, and a method whose tokens differ from eager's is never the best), else
    inductor's."""
    cgd = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    if cgd is not None and cgd.status in (Status.OK, Status.FAILED):
        rows = _decode_rows(cgd, readback=False)
        if rows:
            return rows
    ind = q.experiment(results, Experiment.INDUCTOR)
    if ind is not None:
        return _inductor_rows(ind, str((results.manifest.get("profile") or {}).get("dtype") or "float32"))
    scaling = q.experiment(results, Experiment.MODEL_SCALING)
    return _scaling_rows(scaling) if scaling is not None and scaling.status in (Status.OK, Status.FAILED) else []


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
    if row.source == Experiment.MODEL_SCALING or (row.source != Experiment.CUDA_GRAPH_DECODE and not is_eager(row.method)):
        return None  # ceilings bounds the eager step and cuda_graph_decode's methods only
    method = Method.EAGER if is_eager(row.method) else row.method
    return q.maybe(q.experiment(results, Experiment.CEILINGS), spec, method=method, batch=row.batch, dtype=row.dtype)


def stored_mbu(records: Iterable[Record], method: str, batch: Any, dtype: Any, step_ms: Any) -> Metric | None:
    """The one MBU every page and `lab headline` print beside a step of `step_ms` (lab.step.ceilings.mbu, stored once):
    cuda_graph_decode's, else ceilings' for that same step (`measured_ms`); where a run older than issue 28 stored both
    for cuda_graph_decode's step, ceilings' (cuda_graph_decode's counted all max_len slots: stale, never shown)."""
    recs, p = list(records), {P.METHOD: method, P.BATCH: batch, P.DTYPE: dtype}
    cgd, ceil = (q.experiment(recs, e) for e in (Experiment.CUDA_GRAPH_DECODE, Experiment.CEILINGS))
    own, step = q.maybe(cgd, M.MBU, **p), q.maybe(cgd, M.STEP_MS, **p, readback=False)
    found, measured = q.maybe(ceil, M.MBU, **p), q.maybe(ceil, M.MEASURED_MS, **p)
    if found is None or measured is None or measured.value != (step.value if own and step else step_ms):
        found = own
    return found if found is not None and is_number(found.value) else None


def own_mbu(results: Results, row: StepRow) -> Metric | None:
    """The row's method's own MBU (`stored_mbu`; model_scaling's for its row; none for a compiled CPU step)."""
    if row.source == Experiment.MODEL_SCALING and row.params is not None:
        return q.maybe(q.experiment(results, row.source), M.MBU, **row.params)
    if row.source == Experiment.INDUCTOR and not is_eager(row.method):
        return None  # ceilings bounds the eager step and cuda_graph_decode's methods only
    return stored_mbu(results.experiments, Method.EAGER if is_eager(row.method) else row.method, row.batch, row.dtype,
                      row.step.value)


TIMES_THE_STEP = (Experiment.CUDA_GRAPH_DECODE, Experiment.INDUCTOR, Experiment.CEILINGS)  # what ceilings bounds


@dataclass
class Bound:
    """What ceilings stored of one method, batch and dtype: which bound binds, the bound and measured ÷ bound, and
    why the bound is not meaningful ('' where it is): a measured step of that method, batch and dtype below it."""

    binding: Metric | None
    bound: Metric | None
    ratio: Metric | None
    lowest: float | None = None  # the lowest step time stored for it (every experiment that times the step)
    why_not: str = ""

    def allows(self, value: Any) -> bool:
        """Whether a bound of `value` ms can be shown: no stored step of the method is faster than it."""
        return self.lowest is None or not is_number(value) or value <= self.lowest

    @property
    def text(self) -> str:
        """'launch-bound', 'bound not meaningful: ...', or '' where ceilings stored nothing."""
        if self.why_not:
            return f"bound not meaningful: {self.why_not}"
        return f"{self.binding.value}-bound" if self.binding is not None else ""

    def cell(self) -> Cell:
        """The binding bound in a table: its kind, 'not meaningful' (why in its title), or '—'."""
        if self.why_not:
            return Cell("not meaningful", cls="muted", title=self.text)
        return Cell(str(self.binding.value) if self.binding is not None else "—")


def bound_of(records: Iterable[Record], method: str, batch: Any, dtype: Any) -> Bound:
    """ceilings' bound of `method` (eager for its variants) at this batch and dtype, set against every step time the
    run stored for it (cuda_graph_decode's, inductor's, ceilings' own): the one verdict the pages and `lab headline`
    show."""
    recs, method = list(records), Method.EAGER if is_eager(method) else method
    ceil = q.experiment(recs, Experiment.CEILINGS)
    binding, bound, ratio = (q.maybe(ceil, s, method=method, batch=batch, dtype=dtype)
                             for s in (M.BINDING, M.BOUND_MS, M.MEASURED_OVER_BOUND))
    steps = [(rid, m) for rid in TIMES_THE_STEP for m in q.all(q.experiment(recs, rid), M.STEP_MS)
             if is_number(m.value) and not m.params.get(P.READBACK) and m.params.get(P.BATCH, 1) == batch
             and m.params.get(P.DTYPE, dtype) == dtype and (is_eager(m.params.get(P.METHOD)) if method == Method.EAGER
                                                             else m.params.get(P.METHOD) == method)]
    if bound is None or not steps:
        return Bound(binding, bound, ratio)
    rid, low = min(steps, key=lambda s: float(s[1].value))
    if not is_number(bound.value) or low.value >= bound.value:
        return Bound(binding, bound, ratio, float(low.value))
    noisy = [f"{method}'s IQR is {pct(m.spread.rel_iqr)} in {r}" for r, m in steps if m.spread and m.spread.noisy]
    return Bound(binding, bound, ratio, float(low.value), "; ".join([
        f"{method}'s step in {rid} ({fmt(low.value, units.MS)}) is below its {fmt(bound.value, units.MS)} bound"] + noisy))


def row_bound(results: Results, row: StepRow) -> Bound:
    """`bound_of` for a step row (none for a row ceilings does not bound: a compiled CPU step, a sweep's)."""
    bounded = ceiling(results, M.BINDING, row) is not None or ceiling(results, M.BOUND_MS, row) is not None
    return bound_of(results.experiments, row.method, row.batch, row.dtype) if bounded else Bound(None, None, None)


def floor_ms(results: Results, batch: Any, dtype: str, method: str | None = None) -> float | None:
    """The weight-read floor of a step at this batch and dtype (ms): ceilings' `bound_bandwidth_ms` (the bytes a step
    must read at the measured copy bandwidth: the same for every method), the method's own row where it has one."""
    found = [m for m in q.all(q.experiment(results, Experiment.CEILINGS), M.BOUND_BANDWIDTH_MS, batch=batch, dtype=dtype)
             if is_number(m.value)]
    own = [m for m in found if m.params.get(P.METHOD) == method] or found
    return float(own[0].value) if own else None


def answer(results: Results, case: Case) -> str:
    """One line: the fastest correct method against eager, with its stored speedup, bound and MBU."""
    best, eager = case.best, case.eager
    text = f"B={fmt(case.batch)}, {case.dtype}: "
    if is_eager(best.method):
        return text + f"eager is the fastest correct method ({fmt(eager.step.value, units.MS)})"
    text += f"{best.label} {fmt(best.step.value, units.MS)} against eager {fmt(eager.step.value, units.MS)}"
    if best.speedup_text:
        text += f": {best.speedup_text}"
    mbu = own_mbu(results, best)
    extra = [row_bound(results, best).text, f"MBU {pct(mbu.value)}" if mbu else ""]
    return text + (f" ({', '.join(e for e in extra if e)})" if any(extra) else "")


def _best_table(results: Results, found: list[Case]) -> Table:
    table = Table(columns=["batch", "dtype", "eager step", "fastest correct method", "its step",
                           "its speedup [95% interval]", "its MBU", "its binding bound"],
                  caption="Eager against the fastest correct method, per batch and dtype (MBU and bound: that "
                          "method's own)", id="best-table")
    for c in found:
        bound, mbu = row_bound(results, c.best), own_mbu(results, c.best)
        table.rows.append([Cell(fmt(c.batch), cls="num"), Cell(c.dtype), timing_cell(c.eager.step),
                           Cell(c.best.label), timing_cell(c.best.step),
                           Cell(c.best.speedup_text or "—", cls="num"),
                           Cell(pct(mbu.value) if mbu else "—", cls="num"),
                           bound.cell()])
    return table


def _decode_tables(rec: Record | None) -> list[Table]:
    """cuda_graph_decode: method × batch per dtype and readback, each cell the median, stored speedup, spread."""
    groups: dict[tuple[str, bool], list[StepRow]] = {}
    for r in _decode_rows(rec) if rec is not None else []:
        groups.setdefault((r.dtype, bool(r.step.params.get(P.READBACK))), []).append(r)
    tables = []
    for (dtype, readback), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] != "float32", kv[0][0])):
        batches = sorted({r.batch for r in rows}, key=sort_key)
        table = Table(columns=["method"] + [f"batch {b}" for b in batches], cls="speedup", collapsed=readback,
                      caption=f"Median ms per decode step, dtype {dtype}, "
                              f"{'reading the token back each step' if readback else 'no readback'}")
        for method in sorted({r.method for r in rows}, key=method_rank):
            cells = [Cell(method)]
            for b in batches:
                hit = next((r for r in rows if (r.method, r.batch) == (method, b)), None)
                vs = f"{hit.speedup_text} vs eager" if hit and hit.speedup_text else ""
                cell = timing_cell(hit.step if hit else None, extra=vs)
                if hit is not None and hit.ci is not None and all(map(is_number, hit.ci)):  # faster only when shown
                    cell.cls += " good" if hit.ci[0] > 1 else (" bad" if hit.ci[1] < 1 else "")
                cells.append(cell)
            table.rows.append(cells)
        tables.append(table)
    return tables


def _inductor_table(results: Results, rows: list[StepRow]) -> Table:
    rec = q.experiment(results, Experiment.INDUCTOR)
    table = Table(columns=["step", "batch", "method", "median step", "speedup vs eager (stored)", "compile (setup)"],
                  caption="Inductor on the CPU: the decode step eager and compiled (inductor)", id="inductor-table")
    for r in sorted(rows, key=lambda r: (r.kind, sort_key(r.batch), not is_eager(r.method))):
        setups = [] if is_eager(r.method) else [s for s in q.all(rec, M.SETUP_S, step=r.kind)
                                                 if s.params.get(P.METHOD, r.method) == r.method]
        table.rows.append([Cell(r.kind), Cell(fmt(r.batch), cls="num"), Cell(r.method), timing_cell(r.step),
                           value_cell(r.speedup, units.X), value_cell(setups[0] if setups else None, units.S)])
    return table


def _ceilings_own_steps(results: Results) -> Table:
    return Table(columns=["method", "batch", "dtype", "median step"], caption="The eager decode step timed by "
                 "ceilings at every batch of the profile (ceilings)",
                 rows=[[*param_cells(m.params, P.METHOD, P.BATCH, P.DTYPE), timing_cell(m)]
                       for m in q.all(q.experiment(results, Experiment.CEILINGS), M.STEP_MS)])


def steps(results: Results) -> Section:
    rows = step_rows(results)
    found = cases(rows)
    tables = [_best_table(results, found)]
    if rows and rows[0].source == Experiment.CUDA_GRAPH_DECODE:
        tables += _decode_tables(q.experiment(results, Experiment.CUDA_GRAPH_DECODE))
        source = ("cuda_graph_decode: each cell the median step time, its stored speedup over eager at the same batch, "
                  "and the spread (IQR as a share of the median; ⚠ over 10%).")
    elif rows and rows[0].source == Experiment.MODEL_SCALING:
        source = (f"No cuda_graph_decode in this run: the decode step as model_scaling timed it ({SCALING_SIZE}, "
                  "batch 1, float32); the sweep's own section has every size.")
    elif rows:
        tables.append(_inductor_table(results, rows))
        source = "No GPU in this run: the decode step as the CPU experiments timed it, eager against Inductor."
    else:
        source = ""
    intro = "\n".join([answer(results, c) for c in found] + ([source] if source else []))
    # a sweep run's page opens with its sweeps: a copy of one of their rows, or a section with nothing, comes after
    return shown("steps", "Step time: the fastest correct method", intro, tables + [_ceilings_own_steps(results)],
                 why_absent(results, Experiment.CUDA_GRAPH_DECODE, Experiment.INDUCTOR),
                 minor=not rows or rows[0].source == Experiment.MODEL_SCALING)
