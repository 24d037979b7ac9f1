"""How the hand-fused step's gemm path called the library, per projection: the forms timed when the method was
built, each one's median, and the one chosen (the `fused_layouts` notes, lab.step.fused.layout)."""

from __future__ import annotations

from typing import Any

from lab.contract import notes as N, units
from lab.contract.names import Param as P
from lab.contract.results import Results

from report.sections.fused_kernels import fused_notes
from report.draw.style import display
from report.draw.tables import Cell, Table, fmt, num


def table(note: dict[str, Any]) -> Table:
    p, projections = note["params"], note["projections"] if isinstance(note["projections"], dict) else {}
    forms = list(dict.fromkeys(form for pick in projections.values() if isinstance(pick, dict)
                               for form in pick.get("candidates") or {}))
    how = ("each form timed with CUDA events when the method was built (median µs a call); the fastest kept"
           if note.get("timed") else f"not timed: {note.get('why') or 'no reason recorded'}; the declared default used")
    t = Table(columns=["projection", "product (B × in → out)", "default", "chosen", *forms],
              caption=f"How {display(str(note[P.METHOD]))}'s gemm path called the library, batch {fmt(p.get(P.BATCH))}, "
                      f"{p.get(P.DTYPE)}: {how}" + ("; TF32 allowed" if note.get("allow_tf32") else ""),
              id=f"fused-layouts-{note[P.METHOD]}-b{p.get(P.BATCH)}-{p.get(P.DTYPE)}", cls="kernels", collapsed=True)
    for name, pick in projections.items():
        if not isinstance(pick, dict):
            continue
        shape = pick.get("shape") or []
        product = f"{shape[0]} × {shape[1]} → {shape[2]}" if len(shape) == 3 else "?"
        cands = pick.get("candidates") or {}
        cells = [Cell(f"failed: {c['error']}"[:80], title=str(c["error"])) if c.get("error")
                 else num(c.get("median_us"), units.US) for c in (cands.get(form) or {} for form in forms)]
        chosen = str(pick.get("chosen"))
        t.rows.append([Cell(name), Cell(product), Cell(str(pick.get("default"))),
                       Cell(chosen, cls="good" if chosen != pick.get("default") else "", title=str(pick.get("reason") or "")),
                       *cells])
    return t


def tables(results: Results) -> list[Table]:
    return [table(n) for n in fused_notes(results, N.FUSED_LAYOUTS)]
