"""fused_persistent's table (run by name only: `--only fused_persistent`): the fused step with one persistent kernel
a layer beside the five-kernel step, per size, dtype and variant: step time, MBU, and the persistent step's speedup
over the faster five-kernel variant with its 95% interval. Stored figures only."""

from __future__ import annotations

from lab.contract import metrics as M, query as q
from lab.contract.names import Experiment, Param as P
from lab.contract.results import Results

from report.draw.tables import Cell, Table, estimate_cell, timing_cell, value_cell
from report.sections.section import Section, shown, why_absent


def persistent(results: Results) -> Section | None:
    rec = q.experiment(results, Experiment.FUSED_PERSISTENT)
    if rec is None:
        return None
    table = Table(columns=["size", "dtype", "batch", "variant", "step", "MBU", "speedup over the faster five-kernel "
                           "variant"], id="fused-persistent",
                  caption="Each variant's plan on one mid-decode state, captured and replayed in rotating rounds "
                          "(CUDA events); the speedup's interval pairs the rounds")
    for m in q.all(rec, M.STEP_MS):
        where = {k: m.params[k] for k in (P.SIZE, P.DTYPE, P.BATCH, P.VARIANT)}
        table.rows.append([Cell(str(where[P.SIZE])), Cell(str(where[P.DTYPE])), Cell(str(where[P.BATCH])),
                           Cell(str(where[P.VARIANT])), timing_cell(m), value_cell(q.maybe(rec, M.MBU, **where)),
                           estimate_cell(q.maybe(rec, M.SPEEDUP_VS_FUSED, **where),
                                         q.interval(rec, M.SPEEDUP_VS_FUSED, **where))])
    return shown(Experiment.FUSED_PERSISTENT, "One persistent kernel a layer", "The fused step's 62 launches made 14: "
                 "each layer's five kernels the phases of one launch, a grid barrier between them "
                 "(lab.step.fused.persistent), measured in a child process with a watchdog.", [table],
                 why_absent(results, Experiment.FUSED_PERSISTENT))
