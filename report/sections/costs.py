"""What capturing or compiling costs before it pays: setup seconds, the saving per step, and break-even, all as
the experiments stored them (cuda_graph_decode per method, batch and dtype; graph_cost; compile_cost per cache
phase). Nothing is recomputed here: a run made before an experiment stored a figure shows it as not stored.
"""

from __future__ import annotations

from typing import Any

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract import units
from lab.contract.names import Experiment, Method, method_rank, Param as P
from lab.contract.results import Metric, Record, Results

from report.sections.section import Section, shown, why_absent
from report.sections.steps import cases, step_rows
from report.draw.tables import Cell, Table, fmt, num, param_cells, pivot, sort_key, timing_cell, value_cell

NOT_STORED = "not stored"


# Inductor's compile captured by hand: each may reuse compile-default's compilation of the same step
REUSES_COMPILE = (Method.COMPILE_GRAPH, Method.COMPILE_GRAPH_COMBO, Method.COMPILE_GRAPH_PDL, Method.COMPILE_GRAPH_COORDESC)


def stale_break_even(rec: Record | None, method: str, batch: Any, dtype: Any) -> str:
    """Why the stored break-even of `method` is known wrong, or "": a method that reused compile-default's
    compilation (its setup below that compile's) in a run whose lab did not yet add the reused compile to it
    counted only its capture. A lab that adds it writes a `break_even_includes` note wherever a method reused a
    compile: a record with any such note names every reuse, so a method it does not name compiled for itself (its
    setup may still be below compile-default's, from the caches that compile filled: gpu-full's combo and PDL
    levers, 2026-12-03)."""
    own, compiled = (q.maybe(rec, M.SETUP_S, method=m, batch=batch, dtype=dtype) for m in (method, Method.COMPILE_DEFAULT))
    knows_reuse = rec is not None and any(N.BREAK_EVEN_INCLUDES.parse(key) is not None for key in rec.notes)
    if (rec is None or method not in REUSES_COMPILE or own is None or compiled is None or not own.value < compiled.value
            or knows_reuse):
        return ""
    return (f"stale: counts only the capture ({fmt(own.value, units.S)}), not the {fmt(compiled.value, units.S)} "
            "compile it reused (this run's lab did not add it)")


def break_even_cell(m: Metric | None, stale: str = "") -> Cell:
    """A stored break-even: a count, 'never' (stored null: the method saves nothing), or not stored; a stale one
    (`stale_break_even`) says so."""
    if m is None:
        return Cell(NOT_STORED, cls="muted", title="this run's lab version did not store this figure")
    if m.value is None:
        return Cell("never (no saving)", cls="bad")
    return Cell(f"{fmt(m.value)} (stale)", cls="num stale", title=stale) if stale else num(m.value, m.unit)


def method_costs(rec: Record | None) -> Table:
    """cuda_graph_decode: per method, batch and dtype, the setup, the step (that dtype's), eager's, and the stored
    saving and break-even."""
    table = Table(columns=["method", "batch", "dtype", "setup (compile/capture)", "step", "eager step",
                          "saving per step", "break-even steps"], id="method-costs",
                  caption="First-call cost of each method and the steps it takes to pay (cuda_graph_decode)")
    setups = q.all(rec, M.SETUP_S)
    for m in sorted(setups, key=lambda m: (str(m.params.get(P.DTYPE)) != "float32", str(m.params.get(P.DTYPE)),
                                           method_rank(m.params.get(P.METHOD)), sort_key(m.params.get(P.BATCH)))):
        p: dict[str, Any] = {k: m.params[k] for k in (P.METHOD, P.BATCH, P.DTYPE) if k in m.params}
        step = q.maybe(rec, M.STEP_MS, readback=False, **p)
        eager = q.maybe(rec, M.STEP_MS, readback=False, **(p | {P.METHOD: Method.EAGER}))
        saving, be = q.maybe(rec, M.SAVING_MS_PER_STEP, **p), q.maybe(rec, M.BREAK_EVEN_STEPS, **p)
        table.rows.append([*param_cells(p, P.METHOD, P.BATCH, P.DTYPE), num(m.value, m.unit), timing_cell(step),
                           timing_cell(eager), value_cell(saving) if saving else Cell(NOT_STORED, cls="muted"),
                           break_even_cell(be, stale_break_even(rec, str(p.get(P.METHOD)), p.get(P.BATCH),
                                                                p.get(P.DTYPE)))])
    return table


def compile_tables(rec: Record | None) -> list[Table]:
    """compile_cost: every first call (target, depth, cache phase, trial), then the stored break-even per phase."""
    calls = sorted(q.all(rec, M.FIRST_CALL_S),  # an earlier lab's repeats are dropped at load (lab.contract.results)
                   key=lambda m: (str(m.params.get(P.TARGET)), sort_key(m.params.get(P.N_LAYER)),
                                  str(m.params.get(P.PHASE)), sort_key(m.params.get(P.TRIAL))))
    first_calls = Table(columns=["target", "layers", "phase", "trial", "first call"], id="first-calls",
                        caption="torch.compile first call, cold vs warm cache, each in a fresh process (compile_cost)",
                        rows=[[*param_cells(m.params, P.TARGET, P.N_LAYER, P.PHASE, P.TRIAL), num(m.value, m.unit)]
                              for m in calls])
    pays = Table(columns=["target", "phase", "saving per call", "break-even calls"], id="compile-break-even",
                 caption="Break-even of the compile: the saving per call measured in that phase's process, and the "
                         "calls after which the first call has paid for itself (compile_cost)",
                 rows=[[*param_cells(m.params, P.TARGET, P.PHASE),
                        value_cell(saving) if (saving := q.maybe(rec, M.SAVING_MS_PER_CALL, **m.params))
                        else Cell(NOT_STORED, cls="muted"), break_even_cell(m)]
                       for m in q.all(rec, M.BREAK_EVEN_CALLS)])
    steady = pivot(rec, [P.METHOD, P.TARGET], [M.STEADY_MS], collapsed=True,
                   caption="Steady-state call time in the warm child (compile_cost)")
    return [first_calls, pays, steady]


def first_call_behind(rec: Record | None, phase: str, target: str) -> Metric | None:
    """The first call a phase's break-even was paid against: the full depth's (the most layers), or for a target
    timed in trials the last trial (the process whose saving was measured)."""
    calls = q.all(rec, M.FIRST_CALL_S, phase=phase, target=target)
    plain = [m for m in calls if P.TRIAL not in m.params]
    if plain:
        return max(plain, key=lambda m: sort_key(m.params.get(P.N_LAYER)))
    return max(calls, key=lambda m: sort_key(m.params.get(P.TRIAL))) if calls else None


def phase_figures(rec: Record | None, target: str) -> dict[str, tuple[Metric | None, Metric | None]]:
    """Per cache phase (cold, warm): the first call its break-even was paid against, and the stored break-even."""
    return {p: (first_call_behind(rec, p, target), q.maybe(rec, M.BREAK_EVEN_CALLS, phase=p, target=target))
            for p in ("cold", "warm")}


def compile_answer(rec: Record | None) -> list[str]:
    """One line per target: the full-depth first call cold and warm, and the stored break-even of each phase."""
    lines = []
    for target in sorted({str(m.params.get(P.TARGET)) for m in q.all(rec, M.BREAK_EVEN_CALLS)}):
        parts = []
        for phase, (fc, be) in phase_figures(rec, target).items():
            if be is None:
                continue
            pay = "never pays" if be.value is None else f"pays after {fmt(be.value)} calls"
            parts.append(f"{phase} {fmt(fc.value, units.S)}, {pay}" if fc else f"{phase}: {pay}")
        if parts:
            lines.append(f"Compiling {target}: " + "; ".join(parts) + ".")
    return lines


def costs(results: Results) -> Section:
    cgd = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    methods = method_costs(cgd)
    graph_cost = pivot(q.experiment(results, Experiment.GRAPH_COST), [P.BATCH],
                       [M.CAPTURE_S, M.SAVING_MS_PER_STEP, M.BREAK_EVEN_STEPS, M.STATE_MIB, M.GRAPH_POOL_MIB],
                       caption="Manual CUDA graph: capture cost, memory and break-even (graph_cost)")
    cc = q.experiment(results, Experiment.COMPILE_COST)
    lines = []
    for c in cases(step_rows(results)):
        if c.best.source != Experiment.CUDA_GRAPH_DECODE or c.best is c.eager:
            continue
        p = {P.METHOD: c.best.method, P.BATCH: c.batch, P.DTYPE: c.dtype}
        setup, be = q.maybe(cgd, M.SETUP_S, **p), q.maybe(cgd, M.BREAK_EVEN_STEPS, **p)
        if setup is not None:
            stale = stale_break_even(cgd, c.best.method, c.batch, c.dtype)
            pay = "break-even not stored" if be is None else ("never pays" if be.value is None else
                                                              f"pays after {fmt(be.value)} steps" + (f" ({stale})" if stale else ""))
            lines.append(f"{c.best.method} at B={fmt(c.batch)}, {c.dtype}: setup {fmt(setup.value, units.S)}, {pay}.")
    lines += compile_answer(cc)
    lines.append("Setup is paid once; break-even is setup ÷ (eager step − method step), stored by the experiment "
                 "that measured both.")
    return shown("costs", "Compile and capture costs, break-even", "\n".join(lines), [methods, graph_cost,
                 *compile_tables(cc)], why_absent(results, Experiment.CUDA_GRAPH_DECODE, Experiment.GRAPH_COST,
                                                  Experiment.COMPILE_COST))

