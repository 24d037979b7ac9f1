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


def _scaling_chart(notes: dict, flops: bool):
    import warnings

    from report.sections import sweeps
    from synthetic_runs import metric, rec, results

    p = {"size": "gpt2-124M", "batch": 1, "dtype": "float32"}
    metrics = [metric("step_ms", 6.27, "ms", method="eager", **p), metric("step_ms", 0.518, "ms", method="graph", **p),
               metric("speedup_vs_eager", 12.1, "x", method="graph", **p)]
    if flops:
        metrics.append(metric("flops_per_kernel", 3.0e6, "FLOP", method="graph", **p))
    record = results(rec("model_scaling", metrics, notes=notes)).record("model_scaling")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "cannot be log-scaled" would be library noise on the console
        _, [chart] = sweeps._scaling(record)
    assert chart.svg and not chart.error, chart.error
    return chart


def test_the_scaling_chart_says_which_panel_the_run_stored_nothing_for() -> None:
    """A model_scaling record without the parameter counts' notes or FLOPs per kernel: each panel says what is
    missing, where a log axis of nothing drew an empty frame (the gain against size plotted at 0 parameters)."""
    bare = _scaling_chart({}, flops=False)
    assert bare.data["empty"] == ["left", "right"] and "left" not in bare.data and "right" not in bare.data
    assert "no parameter counts stored" in bare.svg and "no FLOPs per kernel stored" in bare.svg
    full = _scaling_chart({"parameters.gpt2-124M": 124_439_808}, flops=True)
    assert "empty" not in full.data
    assert full.data["left"] == {"graph, float32, b1": [(124.439808, 12.1)]}
    assert full.data["right"] == {"graph": [(3.0, 12.1)]}


def test_the_scaling_table_gives_mbu_with_its_interval_where_the_run_stored_one() -> None:
    """model_scaling stores MBU's interval (the step's, over the copy bandwidth): the table prints it beside the MBU
    under the step's median; a run that stored none (made before it was) prints the MBU alone."""
    from report.sections import sweeps
    from synthetic_runs import metric, rec, results

    p = {"size": "gpt2-1.5B", "batch": 1, "dtype": "float32"}

    def cell(with_interval: bool) -> str:
        metrics = [metric("step_ms", 1.8523, "ms", method="fused-pdl-prefetch", **p),
                   metric("mbu", 0.7928, "fraction", method="fused-pdl-prefetch", **p)]
        if with_interval:
            metrics += [metric("mbu_ci_low", 0.7921, "fraction", method="fused-pdl-prefetch", **p),
                        metric("mbu_ci_high", 0.7932, "fraction", method="fused-pdl-prefetch", **p)]
        [table, *_], _ = sweeps._scaling(results(rec("model_scaling", metrics)).record("model_scaling"))
        return table.rows[0][3].sub

    assert cell(True) == "MBU 0.793 [0.792, 0.793]"  # (the report's three significant digits)
    assert cell(False) == "MBU 0.793"
