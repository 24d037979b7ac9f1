"""report.sections.fused_layouts: the fused gemm path's library-call forms per projection, as the build recorded them (a note made
by lab.step.fused.layout's own classes), and the untimed default on a host that could not time them."""

from __future__ import annotations

from lab.contract import notes as N
from lab.step.fused.layout import Choice, Pick, Trial
from report.sections import breakdown, fused_layouts
from synthetic_runs import decode, results

P = {"batch": 16, "dtype": "float32"}


def _note(timed: bool = True) -> dict:
    fc = Pick("fc", "lt-t", "blas-n", timed, "fastest",
              (Trial("lt-t", (45.1, 44.9, 45.0)), Trial("blas-n", (8.2, 8.4, 8.3)),
               Trial("lt-n", (), "RuntimeError: no kernel")), (16, 768, 3072))
    proj = Pick("proj", "lt-t", "lt-t", timed, "the default (a tie within 1%)",
                (Trial("lt-t", (5.0, 5.1, 5.0)), Trial("blas-n", (5.02, 5.05, 5.0))), (16, 768, 768))
    picks = (fc, proj)
    choice = Choice(picks, timed=timed, why="" if timed else "no CUDA: the declared default")
    return {"method": "fused", "params": P, **choice.as_note()}


def _results(note: dict):
    cgd = decode({"eager": 2.1, "graph": 2.1, "fused": 1.7}, correct={"eager": True, "graph": True, "fused": True})
    cgd["notes"][N.FUSED_LAYOUTS.key_for(method="fused", shape="b16.float32")] = note
    return results(cgd)


def test_each_projection_shows_every_forms_median_and_the_choice() -> None:
    note = _note()
    assert N.FUSED_LAYOUTS.problem(note) is None
    (table,) = fused_layouts.tables(_results(note))
    assert table.columns == ["projection", "product (B × in → out)", "default", "chosen", "lt-t", "blas-n", "lt-n"]
    rows = {r[0].text: r for r in table.rows}
    assert [c.text for c in rows["fc"][1:4]] == ["16 × 768 → 3072", "lt-t", "blas-n"]
    assert "good" in rows["fc"][3].cls and "good" not in rows["proj"][3].cls  # a choice away from the default
    assert rows["fc"][6].text.startswith("failed: RuntimeError") and rows["proj"][6].text == "—"
    assert "timed with CUDA events" in table.caption
    assert table in breakdown.kernel_tables(_results(note))  # shown where the time goes


def test_an_untimed_build_says_why_and_that_the_default_was_used() -> None:
    (table,) = fused_layouts.tables(_results(_note(timed=False)))
    assert "not timed: no CUDA: the declared default" in table.caption
