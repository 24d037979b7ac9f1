"""fused_anatomy's tables (run by name only: `--only fused_anatomy`): each fused-step kernel's time a launch, as the
step binds it and with one stage left out, and what each stage costs with its 95% interval; then the whole step with
every launch in one variant (where the run has it). Stored figures only; the variants' and stages' names are the
record's (lab.step.fused.stages declares them)."""

from __future__ import annotations

from lab.contract import metrics as M, query as q
from lab.contract.names import Experiment, Param as P
from lab.contract.results import Results

from report.draw.tables import Cell, Table, estimate_cell, timing_cell
from report.sections.section import Section, shown, why_absent

KERNEL, PART = "kernel", "part"  # the params that name a kernel and a stage


def anatomy(results: Results) -> Section | None:
    rec = q.experiment(results, Experiment.FUSED_ANATOMY)
    if rec is None:
        return None
    timed, costs = q.all(rec, M.ANATOMY_US), q.all(rec, M.STAGE_US)
    variants = list(dict.fromkeys(str(m.params[P.VARIANT]) for m in timed))
    parts = list(dict.fromkeys(str(m.params[PART]) for m in costs))
    table = Table(columns=["dtype", KERNEL] + variants + parts, id="fused-anatomy",
                  caption="us a launch of each variant, then what each stage costs (the difference of two variants, "
                          "95% interval): the stages overlap, so they do not add up")
    for dtype, kernel in dict.fromkeys((m.params[P.DTYPE], m.params[KERNEL]) for m in timed):
        where = {P.DTYPE: dtype, KERNEL: kernel}
        row = [Cell(str(dtype)), Cell(str(kernel))]
        row += [timing_cell(q.maybe(rec, M.ANATOMY_US, variant=v, **where)) for v in variants]
        for part in parts:
            row.append(estimate_cell(q.maybe(rec, M.STAGE_US, part=part, **where),
                                     q.interval(rec, M.STAGE_US, part=part, **where)))
        table.rows.append(row)
    tables = [table]
    steps = q.all(rec, M.ANATOMY_STEP_US)
    if steps:
        names = list(dict.fromkeys(str(m.params[P.VARIANT]) for m in steps))
        whole = Table(columns=["dtype", "method"] + names, id="fused-anatomy-step",
                      caption="us a step, every launch in one variant (idle: the chain of launches alone; no_weights: "
                              "no weight bytes; no_wait: no launch waits for its predecessor; no_wait:KERNEL: that kernel's "
                              "launches do not)")
        for dtype, method in dict.fromkeys((m.params[P.DTYPE], m.params[P.METHOD]) for m in steps):
            where = {P.DTYPE: dtype, P.METHOD: method}
            whole.rows.append([Cell(str(dtype)), Cell(str(method))]
                              + [timing_cell(q.maybe(rec, M.ANATOMY_STEP_US, variant=v, **where)) for v in names])
        tables.append(whole)
    return shown(Experiment.FUSED_ANATOMY, "Where a fused kernel's time goes", "Each kernel of the fused step timed in "
                 "a CUDA graph of back-to-back launches over copies of what it streams (lab.step.fused.stages says "
                 "what each variant leaves out).", tables, why_absent(results, Experiment.FUSED_ANATOMY))
