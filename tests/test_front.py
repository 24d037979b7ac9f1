"""report.pages.front: each run's row shows the fastest correct method's own figures, its interval, a badge on FAILED
figures, the sentinel's flag with its numbers, one name per method across runs, and a sweep run's decode step."""

from __future__ import annotations

import pytest

from report.pages import front
from report import render_site
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
    assert line.case.best.speedup_text == "15.3× [15.1, 15.5]"
    assert line.mbu_text == "MBU 45.9%"  # fused's own, not eager's 0.0417 from ceilings
    assert line.bound.text == "bandwidth-bound" and not line.failed_source


def test_no_eager_figure_under_the_fastest_methods_name() -> None:
    recs = _gpu_records()
    recs[0]["metrics"] = [m for m in recs[0]["metrics"] if m["name"] != "mbu"]
    recs[1]["metrics"] = [m for m in recs[1]["metrics"] if m["params"]["method"] == "eager"]
    line = front.lines(results(*recs))[0]
    assert line.mbu is None and line.bound.binding is None and line.mbu_text == line.bound.text == ""


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
    write_run(root / "stale", *_stale_records())
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
    assert texts(row, "case") == ["B=1 float32 compile+graph 12.1× (no interval stored) eager 6.27 ms → compile+graph "
                                  "0.518 ms 12.1× MBU 23.2%"]


def test_the_line_leads_with_what_graph_capture_buys_with_its_interval() -> None:
    line = front.lines(results(*_gpu_records()))[0]
    assert line.gains == [("graph", "5.57× [5.5, 5.6]", "")]  # compile+graph not timed here: not invented


def _stale_records(notes: dict | None = None) -> list[dict]:
    cgd = decode({"eager": 3.9, "compile-default": 2.0, "compile+graph": 0.5},
                 correct={"eager": True, "compile-default": True, "compile+graph": True})
    cgd["metrics"] += [metric("setup_s", 8.2, "s", method="compile-default", **STEP),
                       metric("setup_s", 0.0346, "s", method="compile+graph", **STEP),
                       metric("break_even_steps", 6, "steps", method="compile+graph", **STEP)]
    cgd["notes"] = notes or {}
    return [cgd]


def test_a_break_even_that_counted_only_the_capture_is_shown_stale(index: str) -> None:
    line = front.lines(results(*_stale_records()))[0]
    assert line.case.best.method == "compile+graph" and line.break_even is not None
    assert line.stale.startswith("stale: counts only the capture (0.0346 s), not the 8.2 s compile it reused")
    setup = texts(_row(index, "stale"), "setup")[0]
    assert setup.startswith("B=1 float32 0.0346 s → 6 steps stale: counts only the capture")
    fixed = front.lines(results(*_stale_records({"break_even_includes.b1.float32": {
        "compile+graph": "compile-default's compile (its setup_s reused that compilation)"}})))[0]
    assert fixed.stale == ""  # a lab that added the reused compile stored it right: shown plain
    own = front.lines(results(*_stale_records({"break_even_includes.b64.float32": {
        "compile+graph": "compile-default's compile (its setup_s reused that compilation)"}})))[0]
    assert own.stale == ""  # the note at another case: this lab names every reuse, and this one was not
