"""report.pages.history: each headline figure over the runs of one host and profile, marked by compare's interval rule.

Synthetic runs (the GPU fixture, edited): four runs of one host and profile whose eager step at B=1 moves by
disjoint 95% intervals up (a regression), back down (an improvement), then within an overlapping interval
(the same); a run of another host that is never set against them.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lab.contract.results import write_json_atomic
from report.pages import history
from report.site.discover import load_runs
from report_helpers import gpu_fixture, texts

# (name, start day, eager B=1 fp32 median, its 95% interval)
EAGER = [("r1", 1, 3.00, (2.95, 3.05)), ("r2", 2, 3.60, (3.55, 3.65)), ("r3", 3, 3.00, (2.96, 3.04)),
         ("r4", 4, 3.02, (2.98, 3.07))]
KEEP = ("cuda_graph_decode", "ceilings")
BASE = gpu_fixture.build()


def _run(root: Path, name: str, day: int, eager: float, ci: tuple[float, float], host: str = "fixture-host",
         commit_date: str | None = None, cpu: str | None = None) -> None:
    data = copy.deepcopy(BASE)
    data["experiments"] = [r for r in data["experiments"] if r["id"] in KEEP]
    data["run"]["started_at"] = data["manifest"]["created_at"] = f"2026-11-{day:02d}T09:00:00+00:00"
    data["manifest"]["host"]["real_hostname"] = host
    if cpu is not None:
        data["manifest"]["cpu"]["model"] = cpu
    data["manifest"]["lab"] = {"commit": f"{day:040x}"} | ({"commit_date": commit_date} if commit_date else {})
    cgd = data["experiments"][0]
    for m in cgd["metrics"]:
        p = m["params"]
        if m["name"] == "step_ms" and p == {"method": "eager", "batch": 1, "dtype": "float32", "readback": False}:
            m["value"] = m["spread"]["median"] = eager
            m["spread"].update(q1=eager * 0.99, q3=eager * 1.01, ci_low=ci[0], ci_high=ci[1])
    write_json_atomic(root / name / "results.json", data)


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    for name, day, eager, ci in EAGER:
        _run(tmp_path, name, day, eager, ci)
    _run(tmp_path, "other-host", 5, 9.0, (8.9, 9.1), host="elsewhere")
    return tmp_path


def _series(root: Path) -> list[history.Series]:
    loaded, skipped = load_runs([root])
    assert not skipped
    return history.series(loaded)


def test_each_point_is_marked_against_the_previous_run_by_the_interval_rule(runs: Path) -> None:
    group = next(s for s in _series(runs) if s.host.startswith("fixture-host ("))
    assert [r.name for r in group.runs] == ["r1", "r2", "r3", "r4"]
    eager = group.points["eager step, B=1 float32"]
    assert [p.mark for p in eager] == ["first", "regression", "improvement", "same"]
    assert [p.against for p in eager] == ["", "r1", "r2", "r3"]
    assert eager[1].reason.startswith("disjoint 95% intervals ([2.95, 3.05] vs [3.55, 3.65])")
    assert eager[3].reason.startswith("95% intervals overlap")
    assert eager[1].text == "3.6 ms [3.55, 3.65] (eager)"
    assert group.count("regression") >= 1 and group.count("improvement") >= 1
    assert group.order == "the run's start time (not every run records lab.commit_date)"


def test_another_host_is_its_own_history(runs: Path) -> None:
    other = next(s for s in _series(runs) if s.host.startswith("elsewhere ("))
    assert [r.name for r in other.runs] == ["other-host"]
    assert [p.mark for p in other.points["eager step, B=1 float32"]] == ["first"]


def test_runs_are_ordered_by_commit_date_where_every_run_records_one(tmp_path: Path) -> None:
    # started in the order a, b, c; committed in the order c, a, b
    for name, day, date in (("a", 1, "2026-11-02T00:00:00+00:00"), ("b", 2, "2026-11-03T00:00:00+00:00"),
                            ("c", 3, "2026-11-01T00:00:00+00:00")):
        _run(tmp_path, name, day, 3.0, (2.9, 3.1), commit_date=date)
    (group,) = _series(tmp_path)
    assert [r.name for r in group.runs] == ["c", "a", "b"]
    assert group.order.startswith("the lab's commit date")
    t = history.table(group, {})
    assert t.columns[1] == "commit date" and [row[1].text for row in t.rows][0] == "2026-11-01T00:00:00+00:00"


def test_the_speedup_carries_its_interval_and_the_table_its_marks(runs: Path) -> None:
    group = next(s for s in _series(runs) if s.host.startswith("fixture-host ("))
    best = group.points["fastest correct method's step, B=1 float32"][0]
    assert best.found is not None
    method = best.found[0].params["method"]
    speedup = group.points["its speedup over eager, B=1 float32"]
    assert all(p.found is not None and p.found[0].params["method"] == method for p in speedup)
    t = history.table(group, {"r2": "run-r2.html"}, current=group.runs[1])
    col = t.columns.index("eager step, B=1 float32")
    assert [row[col].sub for row in t.rows] == ["", "regression", "improvement", "same"]
    assert [row[col].cls for row in t.rows] == ["num muted", "num bad", "num good", "num"]
    assert t.rows[1][0].href == "run-r2.html" and t.rows[1][0].cls == "current"


def test_a_stored_speedup_interval_is_shown(tmp_path: Path) -> None:
    _run(tmp_path, "r1", 1, 3.0, (2.95, 3.05))
    loaded, _ = load_runs([tmp_path])
    (group,) = history.series(loaded)
    p = group.points["its speedup over eager, B=1 float32"][0]
    assert p.found is not None
    metric, rec = p.found
    from lab.contract.results import Metric

    rec.metrics += [Metric("speedup_ci_low", 7.5, "x", dict(metric.params)),
                    Metric("speedup_ci_high", 8.25, "x", dict(metric.params))]
    assert "[7.5, 8.25]" in p.text


def test_the_only_run_of_its_host_says_it_has_no_history(runs: Path) -> None:
    loaded, _ = load_runs([runs])
    all_series = history.series(loaded)
    lone = next(r for r in loaded if r.name == "other-host")
    sec = history.section(all_series, lone, {})
    assert not sec.tables and sec.empty.startswith("The only run of host elsewhere (fixture CPU, 16 cores; ") and "with profile gpu" in sec.empty
    r3 = next(r for r in loaded if r.name == "r3")
    sec = history.section(all_series, r3, {})
    assert sec.tables and "4 runs of host fixture-host" in sec.intro and "1 regression(s), 1 improvement(s)" in sec.intro


@pytest.mark.slow
def test_the_site_has_a_history_page_and_a_section_on_each_run_page(runs: Path, tmp_path: Path) -> None:
    from report.site.build import render_site

    site = render_site([runs], tmp_path / "site")
    assert site.history == tmp_path / "site" / "history.html"
    page = site.history.read_text()
    assert 'href="history.html"' in (tmp_path / "site" / "index.html").read_text()
    assert texts(page, "num bad")[0].startswith("3.6 ms [3.55, 3.65] (eager) regression")
    assert "ordered by the run&#39;s start time" in page or "ordered by the run's start time" in page
    run_page = (tmp_path / "site" / "run-r3.html").read_text()
    assert 'id="history"' in run_page and 'class="current"' in run_page
    assert 'id="history"' in (tmp_path / "site" / "run-other-host.html").read_text()


def test_two_machines_that_share_a_hostname_are_two_hosts(runs: Path) -> None:
    """A run on another CPU under the same hostname ("vm" on a cloud) starts its own history: it is never marked
    against the other machine's runs."""
    _run(runs, "r5-epyc", 6, 6.0, (5.9, 6.1), cpu="AMD EPYC 9654")
    groups = {s.host: [r.name for r in s.runs] for s in _series(runs) if s.host.startswith("fixture-host (")}
    assert groups == {"fixture-host (fixture CPU, 16 cores; NVIDIA H200 (test fixture), driver 580.159.04)":
                      ["r1", "r2", "r3", "r4"],
                      "fixture-host (AMD EPYC 9654, 16 cores; NVIDIA H200 (test fixture), driver 580.159.04)":
                      ["r5-epyc"]}


def test_the_front_page_charts_each_figure_with_its_intervals_and_marks(runs: Path, tmp_path: Path) -> None:
    from report.draw import charts
    from report.site.build import render_site

    group = next(s for s in _series(runs) if s.host.startswith("fixture-host ("))
    chart = charts.history(group)
    assert chart is not None and chart.svg and not chart.error
    drawn = chart.data["eager step, B=1 float32"]
    assert [(name, y, low, high) for name, y, low, high, _ in drawn] == [(n, e, *ci) for n, _, e, ci in EAGER]
    assert [mark for *_, mark in drawn] == ["first", "regression", "improvement", "same"]  # drawn red, green
    assert "#b42318" in chart.svg and "#137a3a" in chart.svg
    assert charts.history(next(s for s in _series(runs) if s.host.startswith("elsewhere"))) is None  # one run
    index = render_site([runs], tmp_path / "site").index.read_text()
    assert f'id="{chart.id}"' in index and index.count('class="chart"') == 1
