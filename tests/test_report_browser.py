"""The report opened in a real headless Chromium (Debian's), as a reader would open it: from disk.

Checks: no console errors or page errors, no dialog (an injected script would raise one), every
chart drawn with a non-zero size, and the NOT_RUN tables listing the expected items.

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


@pytest.mark.slow
def test_gpu_page_in_chromium(browser, site) -> None:
    page, problems = open_page(browser, site.out / "run-gpu-fixture.html")
    sizes = page.eval_on_selector_all(
        "figure.chart svg", "els => els.map(e => { const r = e.getBoundingClientRect(); "
                            "return [e.closest('figure').id, r.width, r.height]; })")
    assert {s[0] for s in sizes} == {"chart-step-float32", "chart-setup", "chart-compile-decode_step",
                                     "chart-fusion", "chart-recompiles"}
    assert all(w > 100 and h > 100 for _, w, h in sizes), sizes
    assert [r[:2] for r in rows(page, "not-run-table")] == [["selection", "not_implemented"]]
    assert [r[:3] for r in rows(page, "skipped-table")] == [["cuda_graph_decode", "max-autotune-no-cudagraphs",
                                                             "flag_off"]]
    failed = rows(page, "failed-table")
    assert failed[0][0] == "graph_hazards" and gpu_fixture.SCRIPT_ERROR in failed[0][2]  # shown as text
    assert page.evaluate("document.querySelectorAll('script').length") == 0
    page.close()
    assert problems == []


def test_cpu_page_and_index_in_chromium(browser, site) -> None:
    expected = [[r["id"], r["reason"]["code"]] for r in
                json.loads((FIXTURES / "report_runs" / "cpu-smoke" / "results.json").read_text())["experiments"]
                if r["status"] == "NOT_RUN"]
    page, problems = open_page(browser, site.out / "run-cpu-smoke.html")
    assert [r[:2] for r in rows(page, "not-run-table")] == expected
    sizes = page.eval_on_selector_all("figure.chart svg", "els => els.map(e => e.getBoundingClientRect().height)")
    assert sizes and all(h > 100 for h in sizes)
    page.close()
    index, index_problems = open_page(browser, site.index)
    assert "malformed" in index.inner_text("#skipped-files")
    index.click("text=gpu-fixture")
    index.wait_for_load_state("load")
    assert index.url.endswith("run-gpu-fixture.html")
    index.close()
    assert problems == [] and index_problems == []
