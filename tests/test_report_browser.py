"""The report opened in a real headless Chromium (Debian's), as a reader would open it: from disk.

Checks: no console errors or page errors, no dialog (an injected script would raise one), no network
request, nothing sticking out of the page or cut off at the right edge; on the front page, a run's page and
the comparison, the values shown equal the stored records; every chart drawn with a non-zero size, the
NOT_RUN tables listing the expected items.

Without Chromium this test skips with a reason, except in CI (CI set), where a missing browser is a
failure: CI installs it (`.ci/run`), so its absence there means the install step broke.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from report import render_site
from report.draw.tables import fmt
from report_helpers import FIXTURES, gpu_fixture, lay_out_runs

CHROMIUM = os.environ.get("LAB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("no chromium on PATH (apt-get install -y chromium); CI installs it", allow_module_level=True)
try:
    from playwright import sync_api as playwright
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("playwright is not installed (pip install -e '.[dev]')", allow_module_level=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    return render_site([lay_out_runs(tmp_path_factory.mktemp("runs"))], tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    assert CHROMIUM is not None, "CI is set but chromium is not installed: .ci/run must apt-get install chromium"
    profile = tmp_path_factory.mktemp("chromium-profile")
    with playwright.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
                                                   viewport={"width": 1300, "height": 900})
        yield ctx
        ctx.close()


def open_page(browser, path: Path):
    """Open a page from disk and collect everything that would show a reader something went wrong."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type in ("error", "warning") else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda req: problems.append(f"network request: {req.url}")
            if not req.url.startswith(("file:", "data:", "about:")) else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def rows(page, table_id: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"#{table_id} tbody tr", "trs => trs.map(tr => Array.from(tr.cells).map(td => td.innerText.trim()))")


def stored(data: dict, exp: str, name: str, **params: object) -> object:
    rec = next(r for r in data["experiments"] if r["id"] == exp)
    found = [m for m in rec["metrics"] if m["name"] == name and all(m["params"].get(k) == v for k, v in params.items())]
    assert len(found) == 1, (exp, name, params)
    return found[0]["value"]


def no_overflow(page) -> list[str]:
    """What sticks out of the page to the right, and tables wider than their box that cannot scroll."""
    return page.evaluate("""() => {
        const bad = [];
        if (document.documentElement.scrollWidth > window.innerWidth + 1) bad.push('page scrolls sideways');
        for (const w of document.querySelectorAll('.table-wrap')) {
            const style = getComputedStyle(w);
            if (w.scrollWidth > w.clientWidth + 1 && !['auto', 'scroll'].includes(style.overflowX))
                bad.push('table cut: ' + (w.querySelector('caption') || w).innerText.slice(0, 60));
            if (w.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                bad.push('table box past the edge: ' + (w.querySelector('caption') || w).innerText.slice(0, 60));
        }
        return bad; }""")


def test_front_page_in_chromium(browser, site) -> None:
    page, problems = open_page(browser, site.index)
    assert "malformed" in page.inner_text("#skipped-files")
    runs = page.eval_on_selector_all("#front tr.run-row", "trs => trs.map(tr => tr.dataset.run)")
    assert runs == ["cpu-smoke", "gpu-fixture", "gpu-fixture-older"]
    data = gpu_fixture.build()
    row = "#front tr[data-run='gpu-fixture']"
    p = {"batch": 1, "dtype": "float32"}
    case = page.inner_text(f"{row} .case[data-key='B=1 float32']")
    for value in (fmt(stored(data, "cuda_graph_decode", "step_ms", method="eager", readback=False, **p), "ms"),
                  fmt(stored(data, "cuda_graph_decode", "step_ms", method="compile+graph", readback=False, **p), "ms"),
                  fmt(stored(data, "cuda_graph_decode", "speedup_vs_eager", method="compile+graph", readback=False,
                             **p)) + "×",
                  "MBU " + fmt(stored(data, "cuda_graph_decode", "mbu", method="compile+graph", **p) * 100) + "%",
                  "launch-bound"):
        assert value in case, (value, case)
    be = stored(data, "cuda_graph_decode", "break_even_steps", method="compile+graph", **p)
    assert page.inner_text(f"{row} .setup[data-key='B=1 float32'] .break-even") == fmt(be)
    assert page.inner_text(f"{row} .failed-count") == "1" and "bf16_tokens_equal" in page.inner_text(f"{row} .failed")
    assert page.inner_text(f"{row} .host") == "fixture-host" and page.inner_text(f"{row} .label") == "fixture-label"
    side = page.eval_on_selector_all("#side-by-side tr", "trs => trs.map(tr => Array.from(tr.cells).map(c => "
                                     "c.innerText.trim()))")
    assert side[0] == ["figure", "cpu-smoke", "gpu-fixture", "gpu-fixture-older"]
    chart = "figure.chart[id^='history-chart-'] svg"  # the GPU fixture's two runs: the headline figures over time
    assert page.is_visible(chart) and page.eval_on_selector(chart, "svg => svg.getBoundingClientRect().height") > 100
    assert no_overflow(page) == []
    page.click("text=gpu-fixture-older")
    page.wait_for_load_state("load")
    assert page.url.endswith("run-gpu-fixture-older.html")
    page.close()
    assert problems == []


def test_run_page_in_chromium(browser, site) -> None:
    page, problems = open_page(browser, site.out / "run-gpu-fixture.html")
    sizes = page.eval_on_selector_all(
        "figure.chart svg", "els => els.map(e => { const r = e.getBoundingClientRect(); "
                            "return [e.closest('figure').id, r.width, r.height]; })")
    assert {s[0] for s in sizes} == {"chart-step-float32", "chart-step-bfloat16", "chart-setup",
                                     "chart-compile-decode_core", "chart-compile-mlp", "chart-fusion", "chart-recompiles",
                                     "chart-amdahl"}
    assert all(w > 100 and h > 100 for _, w, h in sizes), sizes
    assert "bf16_tokens_equal" in page.inner_text("#failed-checks-header")
    toc = page.eval_on_selector_all("#toc a", "as => as.map(a => a.getAttribute('href'))")
    assert all(page.query_selector(href) is not None for href in toc) and toc[0] == "#steps"
    # the first screen of the step section answers: the fastest correct method and its stored speedup
    data = gpu_fixture.build()
    answer = page.inner_text("#steps .answer")
    speedup = stored(data, "cuda_graph_decode", "speedup_vs_eager", method="compile+graph", batch=1,
                     dtype="float32", readback=False)
    assert "compile+graph" in answer and f"{fmt(speedup)}×" in answer
    assert page.evaluate("document.querySelector('#steps .answer').getBoundingClientRect().top - "
                         "document.querySelector('#steps h2').getBoundingClientRect().top") < 200
    best = rows(page, "best-table")
    bf16 = [r for r in best if r[1] == "bfloat16"][0]
    assert bf16[3] == "graph" and bf16[4].startswith(fmt(stored(data, "cuda_graph_decode", "step_ms", method="graph",
                                                                 batch=1, dtype="bfloat16", readback=False), "ms"))
    assert [r[:2] for r in rows(page, "not-run-table")] == [["selection", "not_implemented"]]
    failed = rows(page, "failed-table")
    assert failed[0][0] == "graph_hazards" and gpu_fixture.SCRIPT_ERROR in failed[0][2]  # shown as text
    assert page.evaluate("document.querySelectorAll('script').length") == 0
    assert no_overflow(page) == []
    page.close()
    assert problems == []


def test_cpu_page_in_chromium(browser, site) -> None:
    results = json.loads((FIXTURES / "report_runs" / "cpu-smoke" / "results.json").read_text())
    expected = [[r["id"], r["reason"]["code"]] for r in results["experiments"] if r["status"] == "NOT_RUN"]
    page, problems = open_page(browser, site.out / "run-cpu-smoke.html")
    assert [r[:2] for r in rows(page, "not-run-table")] == expected
    ind = rows(page, "inductor-table")
    comp = stored(results, "inductor", "step_ms", method="compile-default", step="indexed")
    assert any(r[0] == "indexed" and r[2] == "compile-default" and r[3].startswith(fmt(comp, "ms")) for r in ind)
    assert "gemm_bound" in page.inner_text("#failed-checks-header")
    sizes = page.eval_on_selector_all("figure.chart svg", "els => els.map(e => e.getBoundingClientRect().height)")
    assert sizes and all(h > 100 for h in sizes)
    assert no_overflow(page) == []
    page.close()
    assert problems == []


def test_comparison_in_chromium(browser, site) -> None:
    page, problems = open_page(browser, site.out / "compare.html")
    c = site.comparisons[0]
    assert page.inner_text("#cmp-1 h2").startswith(f"{c.b.label}")
    why = page.eval_on_selector_all("#cmp-1 table.why-table tbody tr",
                                    "trs => trs.map(tr => Array.from(tr.cells).map(td => td.innerText.trim()))")
    state = [side.manifest["compile_cache"]["state"] for side in (c.a, c.b)]  # A against B, as the page sets them
    assert ["compile cache at start", *state] in why and state[0] != state[1]
    moved = page.eval_on_selector_all("#cmp-1 table.moved-table tbody tr",
                                      "trs => trs.map(tr => Array.from(tr.cells).map(td => td.innerText.trim()))")
    expected = [[r.mark, r.experiment, r.name, fmt(r.a, r.unit), fmt(r.b, r.unit), fmt(r.ratio)] for r in c.moved]
    assert [[m[0], m[1], m[2], m[4], m[5], m[6]] for m in moved] == expected and expected
    assert no_overflow(page) == []
    page.close()
    assert problems == []


def test_history_in_chromium(browser, site) -> None:
    """The two runs of the GPU fixture's host and profile: eager's step at batch 1 as each stored it, and the mark."""
    from report.pages import history

    assert site.history is not None
    page, problems = open_page(browser, site.history)
    series = [s for s in history.series(site.runs) if len(s.runs) > 1]
    assert series, "the fixture site has a host with two runs of one profile"
    s = series[0]
    table_rows = page.eval_on_selector_all(f"table[id='history-{history.slug(s.host)}-{s.profile}'] tbody tr",
                                           "trs => trs.map(tr => Array.from(tr.cells).map(td => td.innerText.trim()))")
    assert [r[0] for r in table_rows] == [run.name for run in s.runs]
    label = next(iter(s.points))  # the first figure: eager's step at batch 1
    for row, point in zip(table_rows, s.points[label]):
        assert row[3].startswith(point.text), (row, point.text)
        if point.found is not None and point.mark not in ("", "first"):
            assert point.mark in row[3]
    assert no_overflow(page) == []
    page.close()
    assert problems == []


# ---------------------------------------------------------------------------- an H200-like run of today's lab

H200 = FIXTURES / "report_runs" / "h200-fixture"  # derived from a real cuda_graph_decode record (h200_fixture.py)
SWEEP = FIXTURES.parent.parent / "manifests" / "reference" / "h200-2026-12-02-sweep"


@pytest.fixture(scope="module")
def h200_site(tmp_path_factory: pytest.TempPathFactory):
    return render_site([H200, SWEEP], tmp_path_factory.mktemp("h200-site"))


def test_h200_front_row_in_chromium(browser, h200_site) -> None:
    data = json.loads((H200 / "results.json").read_text())
    page, problems = open_page(browser, h200_site.index)
    row = "#front tr[data-run='h200-fixture']"
    case = page.inner_text(f"{row} .case[data-key='B=1 float32']")
    best = page.inner_text(f"{row} .case[data-key='B=1 float32'] .best")
    p = {"method": best, "batch": 1, "dtype": "float32"}
    sp = [fmt(stored(data, "cuda_graph_decode", n, readback=False, **p))
          for n in ("speedup_vs_eager", "speedup_ci_low", "speedup_ci_high")]
    assert page.inner_text(f"{row} .case[data-key='B=1 float32'] .speedup") == f"{sp[0]}× [{sp[1]}, {sp[2]}]"
    assert f"MBU {fmt(stored(data, 'cuda_graph_decode', 'mbu', **p) * 100)}%" in case
    assert fmt(stored(data, "cuda_graph_decode", "step_ms", readback=False, **p), "ms") in case
    ratio = stored(data, "sentinel_end", "in_run_over_sentinel", method="eager")
    assert f"({ratio:.3f}x)" in page.inner_text(f"{row} .sentinel-flag")
    sweep = json.loads((SWEEP / "results.json").read_text())
    q = {"size": "gpt2-124M", "batch": 1, "dtype": "float32"}
    case = page.inner_text("#front tr[data-run='h200-2026-12-02-sweep'] .case")
    fastest = page.inner_text("#front tr[data-run='h200-2026-12-02-sweep'] .case .best")
    assert fmt(stored(sweep, "model_scaling", "step_ms", method="eager", **q), "ms") in case
    assert f"MBU {fmt(stored(sweep, 'model_scaling', 'mbu', method=fastest, **q) * 100)}%" in case
    assert no_overflow(page) == []
    page.close()
    assert problems == []


def test_h200_run_page_opens_with_where_the_time_goes(browser, h200_site) -> None:
    data = json.loads((H200 / "results.json").read_text())
    page, problems = open_page(browser, h200_site.out / "run-h200-fixture.html")
    top = page.evaluate("document.querySelector('#where-time-goes').getBoundingClientRect().top")
    assert 0 < top < page.evaluate("window.innerHeight"), top
    assert page.evaluate("document.querySelector('#chart-time-float32').getBoundingClientRect().top") < 900
    for r in rows(page, "floor-table"):
        batch, dtype, method = int(r[0]), r[1], r[2]
        p = {"method": method, "batch": batch, "dtype": dtype}
        assert r[4] == fmt(stored(data, "cuda_graph_decode", "gpu_busy_us", **p), "us")
        assert r[5] == fmt(stored(data, "cuda_graph_decode", "gap_us", **p), "us")
        assert r[6] == fmt(stored(data, "cuda_graph_decode", "step_ms", readback=False, **p), "ms")
        assert r[7] == f"{fmt(stored(data, 'cuda_graph_decode', 'mbu', **p) * 100)}%"  # the stored MBU, no second one
    kernels = rows(page, "top-kernels-b1-float32")
    top_eager = data["experiments"][1]["notes"]["top_kernels.eager.b1.float32"][0]
    assert kernels[0][:4] == ["eager", "1", top_eager["name"], fmt(top_eager["count"])]
    sentinel = rows(page, "sentinel-table")[0]
    assert sentinel[0] == "eager" and sentinel[1].startswith(fmt(stored(data, "sentinel", "sentinel_step_ms",
                                                                        method="eager", batch=1, dtype="float32",
                                                                        when="start"), "ms"))
    assert sentinel[4].startswith(fmt(stored(data, "sentinel_end", "in_run_over_sentinel", method="eager"), "x"))
    charts = page.eval_on_selector_all("#where-time-goes figure.chart svg", "els => els.map(e => "
                                       "e.getBoundingClientRect().height)")
    assert len(charts) == 4 and all(h > 100 for h in charts)
    assert no_overflow(page) == []
    page.close()
    assert problems == []


def test_the_sweep_page_opens_with_its_sweeps(browser, h200_site) -> None:
    page, problems = open_page(browser, h200_site.out / "run-h200-2026-12-02-sweep.html")
    first = page.evaluate("document.querySelector('section.page-section').id")
    assert first.startswith("sweep-"), first
    assert "is not in this run" not in page.inner_text("section.page-section")
    page.close()
    assert problems == []
