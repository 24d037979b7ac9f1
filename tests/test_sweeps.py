"""report/sections/sweeps.py: the committed smoke fixture renders every sweep's section, with its conclusion, chart and units."""

from __future__ import annotations

from pathlib import Path

from lab.contract import metrics as M
from lab.run.manifest import REPO_ROOT

SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")


UNITS = {"peer_generate": "median ms per token", "model_scaling": "speedup over eager, x",
         "context_scaling": "cache length, slots", "graph_buckets": "median ms per step",
         "data_dependent_branch": "median ms per step"}


def test_the_committed_smoke_fixture_renders_every_sweep_section(tmp_path: Path) -> None:
    """From stored records alone (no traces folder): a section per sweep with its conclusion, a chart, units."""
    from report.site import traces
    from report.sections import sweeps
    from report.site.discover import load_runs

    fixture = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"
    runs, skipped = load_runs([fixture])
    assert not skipped
    secs = {s.id: s for s in sweeps.sections(runs[0])}
    assert set(secs) == {f"sweep-{i}" for i in SWEEPS}
    for rid in SWEEPS:
        sec = secs[f"sweep-{rid}"]
        conclusion = runs[0].results.record(rid).metric(M.CONCLUSION.name).value
        assert conclusion in sec.intro and "Rule:" in sec.intro and sec.tables
        assert sec.charts and all(c.svg and not c.error for c in sec.charts), rid
        assert UNITS[rid] in sec.charts[0].svg, rid  # the axes say what they measure, in what unit
    assert sweeps.headline(runs[0].results) == runs[0].results.record("peer_generate").metric(
        M.CONCLUSION.name).value
    assert traces.publish(runs[0], tmp_path) == []  # the fixture keeps no traces: no pages, no error
