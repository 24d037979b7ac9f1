"""report.front: each run's row shows the fastest correct method's own figures, its interval, a badge on FAILED
figures, the sentinel's flag with its numbers, one name per method across runs, and a sweep run's decode step."""

from __future__ import annotations

import pytest

from report import front, render_site
from report_helpers import texts
from synthetic_runs import STEP, check, decode, metric, rec, results, write_run

SENTINEL_FAIL = check("in-run eager within 10% of the fresh-process sentinel", False,
                      "cuda_graph_decode 3.9 ms against the sentinel's 3.3 ms at the start (1.182x)", method="eager")


def _gpu_records(status: str = "OK") -> list[dict]:
    ceilings = rec("ceilings", [metric("mbu", 0.0417, "fraction", method="eager", **STEP),
                                metric("binding", "launch", method="eager", **STEP),
                                metric("binding", "bandwidth", method="fused", **STEP)])
    cgd = decode({"eager": 3.9, "graph": 0.7, "fused": 0.255}, correct={"eager": True, "graph": True, "fused": True},
                 ci={"fused": (15.1, 15.5), "graph": (5.5, 5.6)}, mbu={"eager": 0.03, "graph": 0.17, "fused": 0.459},
                 status=status)
    end = rec("sentinel_end", [metric("in_run_over_sentinel", 1.182, "x", method="eager")], checks=[SENTINEL_FAIL])
    return [cgd, ceilings, end]


def test_the_line_holds_the_fastest_methods_own_figures() -> None:
    line = front.lines(results(*_gpu_records()))[0]
    assert line.case.best.method == "fused"
    assert line.speedup_text == "15.3× [15.1, 15.5]"
    assert line.mbu_text == "MBU 45.9%"  # fused's own, not eager's 0.0417 from ceilings
    assert line.binding_text == "bandwidth-bound" and not line.failed_source


def test_no_eager_figure_under_the_fastest_methods_name() -> None:
    recs = _gpu_records()
    recs[0]["metrics"] = [m for m in recs[0]["metrics"] if m["name"] != "mbu"]
    recs[1]["metrics"] = [m for m in recs[1]["metrics"] if m["params"]["method"] == "eager"]
    line = front.lines(results(*recs))[0]
    assert line.mbu is None and line.binding is None and line.mbu_text == line.binding_text == ""


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "today", *_gpu_records("FAILED"))
    old = rec("inductor", [metric("step_ms", 9.0, "ms", method="eager-indexed", step="indexed"),
                           metric("step_ms", 6.0, "ms", method="compiled-indexed", step="indexed"),
                           metric("speedup_vs_eager", 1.5, "x", method="compiled-indexed", step="indexed")])
    write_run(root / "older-cpu", old, profile="cpu")
    p = {"size": "gpt2-124M", "batch": 1, "dtype": "float32"}
    write_run(root / "sweep", rec("model_scaling", [
        metric("step_ms", 6.27, "ms", method="eager", **p), metric("step_ms", 0.518, "ms", method="compile+graph", **p),
        metric("speedup_vs_eager", 12.1, "x", method="compile+graph", **p),
        metric("tokens_equal", True, method="compile+graph", **p),
        metric("mbu", 0.2322, "fraction", method="compile+graph", **p)]), profile="gpu-sweep")
    site = render_site([root], tmp_path_factory.mktemp("site"))
    return site.index.read_text()


def _row(html: str, run: str) -> str:
    start = html.index(f'data-run="{run}"')
    return html[start:html.index("</tr>", start)]


def test_the_front_row_badges_failed_figures_and_flags_the_sentinel(index: str) -> None:
    row = _row(index, "today")
    case = texts(row, "case")[0]
    assert "fused 0.255 ms 15.3× [15.1, 15.5] MBU 45.9% bandwidth-bound FAILED experiment" in case
    flag = texts(row, "sentinel-flag")[0]
    assert "in-run eager within 10% of the fresh-process sentinel" in flag and "1.182x" in flag and "3.3 ms" in flag


def test_one_name_per_method_across_runs(index: str) -> None:
    assert texts(_row(index, "older-cpu"), "best") == ["compile-default (indexed step)"]


def test_a_sweep_runs_row_shows_its_decode_step(index: str) -> None:
    row = _row(index, "sweep")
    assert "no decode step in this run" not in row
    assert texts(row, "case") == ["B=1 float32 eager 6.27 ms → compile+graph 0.518 ms 12.1× MBU 23.2%"]
