"""The report rendered from fixture runs and from every committed reference run, checked for what a reader sees:
every figure on a page is the figure stored in the records (none recomputed), tables and charts agree, and each
page answers first."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.run.manifest import REPO_ROOT
from lab.contract.results import load
from report.site import build
from report import render_site
from report.site.discover import load_runs
from report.sections.section import Section
from report.draw.tables import fmt
from report_helpers import FIXTURES, gpu_fixture, lay_out_runs, row, table, tables, texts

CPU_RESULTS = json.loads((FIXTURES / "report_runs" / "cpu-smoke" / "results.json").read_text())
GPU = gpu_fixture.build()
REFERENCE_RUNS = sorted(p.parent for p in (REPO_ROOT / "manifests" / "reference").glob("*/results.json"))


def stored(data: dict, exp: str, name: str, **params: object) -> dict:
    """The one metric of a results dict with this name whose params include the given ones."""
    rec = next(r for r in data["experiments"] if r["id"] == exp)
    found = [m for m in rec["metrics"] if m["name"] == name and all(m["params"].get(k) == v for k, v in params.items())]
    assert len(found) == 1, (exp, name, params, len(found))
    return found[0]


def gpu(exp: str, name: str, **params: object) -> dict:
    return stored(GPU, exp, name, **params)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    root = lay_out_runs(tmp_path_factory.mktemp("runs"))
    return render_site([root], tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def gpu_html(site) -> str:
    return (site.out / "run-gpu-fixture.html").read_text()


@pytest.fixture(scope="module")
def cpu_html(site) -> str:
    return (site.out / "run-cpu-smoke.html").read_text()


@pytest.fixture(scope="module")
def index_html(site) -> str:
    return site.index.read_text()


def section(html: str, sid: str) -> str:
    m = re.search(f'<section class="page-section" id="{sid}">(.*?)</section>', html, re.S)
    assert m, sid
    return m.group(1)


# ---------------------------------------------------------------------------- the front page

def front_row(html: str, name: str) -> str:
    m = re.search(f'<tr class="run-row" data-run="{re.escape(name)}">(.*?)</tr>', html, re.S)
    assert m, name
    return m.group(1)


def test_front_page_lists_runs_newest_first_and_what_was_skipped(site, index_html: str) -> None:
    assert [r.name for r in site.runs] == ["cpu-smoke", "gpu-fixture", "gpu-fixture-older"]  # by start time
    assert re.findall(r'<tr class="run-row" data-run="([^"]+)">', index_html) == [r.name for r in site.runs]
    assert len(site.skipped) == 1 and site.skipped[0].path.endswith("malformed/results.json")
    assert "malformed/results.json: not valid JSON" in index_html
    assert 'href="compare.html"' in index_html and (site.out / "compare.html").exists()


def test_front_row_answers_with_stored_figures(index_html: str) -> None:
    html = front_row(index_html, "gpu-fixture")
    assert texts(html, "host") == ["fixture-host"] and texts(html, "label") == ["fixture-label"]
    assert texts(html, "sub device") == ["NVIDIA H200 (test fixture)"] and texts(html, "torch") == ["2.11.0+cu130"]
    cases = {re.search(r"^(B=\S+ \S+)", t).group(1): t for t in texts(html, "case")}
    assert list(cases) == ["B=1 float32", "B=8 float32", "B=64 float32", "B=1 bfloat16"]
    p = {"batch": 1, "dtype": "float32"}
    eager = gpu("cuda_graph_decode", "step_ms", method="eager", readback=False, **p)["value"]
    best = gpu("cuda_graph_decode", "step_ms", method="compile+graph", readback=False, **p)["value"]
    speedup = gpu("cuda_graph_decode", "speedup_vs_eager", method="compile+graph", readback=False, **p)["value"]
    mbu = gpu("cuda_graph_decode", "mbu", method="compile+graph", **p)["value"]
    # first what graph capture buys over eager (this fixture stores no interval: said), then the fastest correct
    graph = gpu("cuda_graph_decode", "speedup_vs_eager", method="graph", readback=False, **p)["value"]
    assert cases["B=1 float32"] == (f"B=1 float32 graph {fmt(graph)}× (no interval stored) · compile+graph "
                                    f"{fmt(speedup)}× (no interval stored) eager {fmt(eager, 'ms')} → compile+graph "
                                    f"{fmt(best, 'ms')} {fmt(speedup)}× MBU {fmt(mbu * 100)}% launch-bound")
    # bf16: compile+graph is faster but its tokens differ from bf16 eager's: said in the gain; graph replay is the
    # fastest correct
    bf = {"batch": 1, "dtype": "bfloat16", "readback": False}
    assert "compile+graph " + fmt(gpu("cuda_graph_decode", "speedup_vs_eager", method="compile+graph", **bf)["value"]) \
        + "× (no interval stored, tokens differ)" in cases["B=1 bfloat16"]
    assert (f"eager {fmt(gpu('cuda_graph_decode', 'step_ms', method='eager', **bf)['value'], 'ms')} → graph "
            f"{fmt(gpu('cuda_graph_decode', 'step_ms', method='graph', **bf)['value'], 'ms')}") in cases["B=1 bfloat16"]
    setups = {t.split()[0] + " " + t.split()[1]: t for t in texts(html, "setup")}
    setup = gpu("cuda_graph_decode", "setup_s", method="compile+graph", **p)["value"]
    be = gpu("cuda_graph_decode", "break_even_steps", method="compile+graph", **p)["value"]
    assert setups["B=1 float32"] == f"B=1 float32 {fmt(setup, 's')} → {fmt(be)} steps"
    compiles = []
    for phase in ("cold", "warm"):
        first = gpu("compile_cost", "first_call_s", phase=phase, target="decode_core", n_layer=12)["value"]
        be = gpu("compile_cost", "break_even_calls", phase=phase, target="decode_core")["value"]
        compiles.append(f"compile, {phase} cache: {fmt(first, 's')} → {fmt(be)} calls")
    assert texts(html, "compile") == compiles
    assert texts(html, "failed-count") == ["1"] and "cuda_graph_decode: bf16_tokens_equal" in html
    statuses = texts(html, "statuses")[0]
    assert statuses == "9 OK · 1 NOT_RUN · 1 FAILED"


def test_front_row_of_a_cpu_run_shows_eager_against_inductor(index_html: str) -> None:
    html = front_row(index_html, "cpu-smoke")
    eager = stored(CPU_RESULTS, "inductor", "step_ms", method="eager", step="indexed")["value"]
    comp = stored(CPU_RESULTS, "inductor", "step_ms", method="compile-default", step="indexed")["value"]
    sp = stored(CPU_RESULTS, "inductor", "speedup_vs_eager", method="compile-default", step="indexed")["value"]
    assert texts(html, "case")[0].startswith(f"B=1 float32 no graph capture measured here eager {fmt(eager, 'ms')} → "
                                             "compile-default (indexed "
                                             f"step) {fmt(comp, 'ms')} {fmt(sp)}×")
    be = stored(CPU_RESULTS, "compile_cost", "break_even_calls", phase="cold", target="decode_core")["value"]
    first = [m for m in next(r for r in CPU_RESULTS["experiments"] if r["id"] == "compile_cost")["metrics"]
             if m["name"] == "first_call_s" and m["params"].get("phase") == "cold"
             and m["params"].get("target") == "decode_core"][0]["value"]
    assert texts(html, "compile")[0] == f"compile, cold cache: {fmt(first, 's')} → {fmt(be)} calls"
    assert texts(html, "failed-count") == ["1"] and "gemm_bound: compile gives about 1.0x" in html
    peer = stored(CPU_RESULTS, "peer_generate", "conclusion")["value"]  # the lab's best beside transformers' best
    assert texts(html, "peer") == [f"against transformers' generate {peer}"]


def test_side_by_side_table_of_every_run(index_html: str) -> None:
    t = table(index_html, id="side-by-side")
    assert [c[0] for c in t["rows"][0]] == ["figure", "cpu-smoke", "gpu-fixture", "gpu-fixture-older"]
    eager = gpu("cuda_graph_decode", "step_ms", method="eager", batch=1, dtype="float32", readback=False)["value"]
    assert [c[0] for c in row(t, "eager step, B=1 float32")][2] == fmt(eager, "ms")
    assert [c[0] for c in row(t, "host")][1:3] == ["vm", "fixture-host · fixture-label"]
    assert [c[0] for c in row(t, "fastest correct method, B=1 bfloat16")][1:3] == ["—", "graph"]
    assert row(t, "copy bandwidth")[2][0] == fmt(gpu("ceilings", "bandwidth_GBps")["value"], "GB/s")
    assert [c[0] for c in row(t, "failed checks")][1:] == ["1", "1", "1"]


# ---------------------------------------------------------------------------- a run's page

def test_run_page_header_and_table_of_contents(gpu_html: str, cpu_html: str) -> None:
    header = re.search(r'<div class="alert" id="failed-checks-header">(.*?)</div>', gpu_html, re.S).group(1)
    assert "1 check failed" in header and "bf16_tokens_equal" in header and "near-tie" in header
    assert re.search(r'<span class="host">fixture-host</span> · <span class="label">fixture-label</span>', gpu_html)
    links = re.findall(r'<li><a href="#([^"]+)">', re.search(r'<nav class="toc" id="toc">(.*?)</nav>', gpu_html,
                                                              re.S).group(1))
    assert links[:4] == ["steps", "ceilings", "costs", "amdahl"]
    assert all(f'id="{sid}"' in gpu_html for sid in links)
    assert texts(cpu_html, "badge-FAILED") == ["1 failed check"]


def test_each_section_answers_first(gpu_html: str) -> None:
    steps = section(gpu_html, "steps")
    answer = texts(steps, "answer")[0]
    best = gpu("cuda_graph_decode", "speedup_vs_eager", method="compile+graph", batch=1, dtype="float32",
               readback=False)["value"]
    assert answer.startswith("B=1, float32: compile+graph") and f"{fmt(best)}× (launch-bound, MBU" in answer
    assert steps.index('class="answer"') < steps.index('id="best-table"') < steps.index("<figure")
    ceilings = texts(section(gpu_html, "ceilings"), "answer")[0]
    p = {"method": "eager", "batch": 1, "dtype": "float32"}
    ratio, measured = (gpu("ceilings", n, **p)["value"] for n in ("measured_over_bound", "measured_ms"))
    assert f"B=1, float32, eager: launch-bound; the measured step ({fmt(measured, 'ms')}) is {fmt(ratio)}×" in ceilings
    amdahl = texts(section(gpu_html, "amdahl"), "answer")[0]
    assert amdahl.startswith(f"gpt2_decode_step: Amdahl predicts 1×, the launch-aware model "
                             f"{fmt(gpu('amdahl', 'predicted_speedup_launch')['value'])}×")


def test_speedup_table_cells_show_stored_speedups_and_spread(gpu_html: str) -> None:
    t = table(gpu_html, caption="Median ms per decode step, dtype float32, no readback")
    assert [c[0] for c in t["rows"][0]] == ["method", "batch 1", "batch 8", "batch 64"]
    m = gpu("cuda_graph_decode", "step_ms", method="graph", batch=1, dtype="float32", readback=False)
    s = gpu("cuda_graph_decode", "speedup_vs_eager", method="graph", batch=1, dtype="float32", readback=False)
    text, cls = row(t, "graph")[1]
    assert text.startswith(f"{fmt(m['value'], 'ms')} ")
    assert f"{fmt(s['value'])}× vs eager" in text and f"IQR {m['spread']['rel_iqr'] * 100:.1f}% · n=25" in text
    # this run stored no intervals: no cell is called faster or slower (the interval rule, tests/test_steps.py)
    assert "good" not in cls and "bad" not in row(t, "compile-default")[1][1]
    noisy, noisy_cls = row(t, "reduce-overhead")[2]
    assert "noisy" in noisy_cls and "⚠" in noisy
    bf = table(gpu_html, caption="Median ms per decode step, dtype bfloat16, no readback")
    assert row(bf, "graph")[1][0].startswith(fmt(gpu("cuda_graph_decode", "step_ms", method="graph", batch=1,
                                                     dtype="bfloat16", readback=False)["value"], "ms"))


def test_a_cpu_runs_step_section_shows_eager_against_inductor(cpu_html: str) -> None:
    steps = section(cpu_html, "steps")
    assert "cuda_graph_decode is NOT_RUN" not in steps
    t = table(steps, id="inductor-table")
    rows = {(r[0][0], r[2][0]): r for r in t["rows"][1:]}
    comp = stored(CPU_RESULTS, "inductor", "step_ms", method="compile-default", step="split")
    sp = stored(CPU_RESULTS, "inductor", "speedup_vs_eager", method="compile-default", step="split")
    setup = stored(CPU_RESULTS, "inductor", "setup_s", step="split")
    r = rows[("split", "compile-default")]
    assert r[3][0].startswith(fmt(comp["value"], "ms")) and r[4][0] == fmt(sp["value"], "x")
    assert r[5][0] == fmt(setup["value"], "s")
    assert texts(steps, "answer")[0].startswith("B=1, float32: compile-default (indexed step)")


def test_ceilings_tables_show_stored_measured_ratio_and_mbu(gpu_html: str, cpu_html: str) -> None:
    t = table(gpu_html, id="bounds-table")
    assert t["rows"][0][9:13] == [("measured", ""), ("measured / bound", ""), ("achieved", ""), ("MBU", "")]
    by_key = {(r[0][0], r[1][0], r[2][0]): r for r in t["rows"][1:]}
    for dtype, method, batch in (("float32", "eager", 1), ("float32", "graph", 64), ("bfloat16", "graph", 1)):
        p = {"method": method, "batch": batch, "dtype": dtype}
        r = by_key[(dtype, method, str(batch))]
        assert r[8][0] == gpu("ceilings", "binding", **p)["value"]
        assert [c[0] for c in r[9:12]] == [fmt(gpu("ceilings", n, **p)["value"], unit) for n, unit in (
            ("measured_ms", "ms"), ("measured_over_bound", "x"), ("achieved_GBps", "GB/s"))]
        # MBU in percent as every page writes it: the method's own, stored once, by cuda_graph_decode (never ceilings')
        assert r[12][0] == f"{fmt(gpu('cuda_graph_decode', 'mbu', **p)['value'] * 100)}%"
    eager1 = by_key[("float32", "eager", "1")]
    assert "binds" in eager1[5][1] and "binds" not in eager1[6][1]
    host = table(gpu_html, caption="Ceilings measured on this host")
    assert [c[0] for c in row(host, "bandwidth_GBps")] == ["bandwidth_GBps", "kind=copy", "4,260 GB/s"]
    cpu = table(cpu_html, id="bounds-table")
    cpu_eager = stored(CPU_RESULTS, "ceilings", "measured_ms", method="eager", batch=1)["value"]
    assert [r for r in cpu["rows"] if r[2][0] == "1"][0][9][0] == fmt(cpu_eager, "ms")  # not "—"


def test_costs_rows_are_per_dtype_with_that_dtypes_times(gpu_html: str) -> None:
    t = table(gpu_html, id="method-costs")
    assert [c[0] for c in t["rows"][0]][:3] == ["method", "batch", "dtype"]
    for method, batch, dtype in (("graph", 1, "float32"), ("graph", 1, "bfloat16"), ("compile+graph", 1, "bfloat16"),
                                 ("compile-default", 1, "float32")):
        r = [r for r in t["rows"] if r[:3] and [c[0] for c in r[:3]] == [method, str(batch), dtype]][0]
        p = {"batch": batch, "dtype": dtype}
        assert r[3][0] == fmt(gpu("cuda_graph_decode", "setup_s", method=method, **p)["value"], "s")
        assert r[4][0].startswith(fmt(gpu("cuda_graph_decode", "step_ms", method=method, readback=False, **p)["value"],
                                      "ms"))
        assert r[5][0].startswith(fmt(gpu("cuda_graph_decode", "step_ms", method="eager", readback=False,
                                          **p)["value"], "ms"))
        be = gpu("cuda_graph_decode", "break_even_steps", method=method, **p)["value"]
        assert r[7][0] == ("never (no saving)" if be is None else fmt(be, "steps"))
    assert "graph_pool_MiB" in [c[0] for c in table(gpu_html, caption="Manual CUDA graph")["rows"][0]]


def test_compile_break_even_is_the_same_in_table_and_chart(site, gpu_html: str) -> None:
    t = table(gpu_html, id="compile-break-even")
    page = next(p for p in site.run_pages if p.run.name == "gpu-fixture")
    chart = next(c for s in page.sections for c in s.charts if c.id == "chart-compile-decode_core")
    for phase in ("cold", "warm"):
        be = gpu("compile_cost", "break_even_calls", phase=phase, target="decode_core")["value"]
        saving = gpu("compile_cost", "saving_ms_per_call", phase=phase, target="decode_core")["value"]
        cells = [[c[0] for c in r] for r in t["rows"] if r[0][0] == "decode_core" and r[1][0] == phase]
        assert cells == [["decode_core", phase, fmt(saving, "ms"), fmt(be, "calls")]]
        assert chart.data["break_even"][phase] == be
        (x0, y0), (x1, y1) = chart.data["series"][phase]
        assert y0 + (y1 - y0) * (be - x0) / (x1 - x0) == pytest.approx(0, abs=1e-9)  # crosses zero there
        assert f"break-even {fmt(be)}" in chart.svg
    mlp = [[c[0] for c in r] for r in t["rows"] if r[0][0] == "mlp"]
    assert [r[3] for r in mlp] == ["never (no saving)", "never (no saving)"]
    never = next(c for s in page.sections for c in s.charts if c.id == "chart-compile-mlp")
    for phase, first_call in (("cold", gpu("compile_cost", "first_call_s", phase="cold", target="mlp")["value"]),
                              ("warm", gpu("compile_cost", "first_call_s", phase="warm", target="mlp")["value"])):
        (x0, y0), (x1, y1) = never.data["series"][phase]
        assert never.data["break_even"][phase] is None and (x0, y0) == (0, -first_call) and y1 < y0


def test_step_chart_draws_one_floor_per_dtype_over_its_own_batches(site) -> None:
    page = next(p for p in site.run_pages if p.run.name == "gpu-fixture")
    drawn = {c.id: c for s in page.sections for c in s.charts}
    for dtype, batches in (("float32", [1, 8, 64]), ("bfloat16", [1])):
        chart = drawn[f"chart-step-{dtype}"]
        assert chart.data["floor"] == {b: gpu("ceilings", "bound_bandwidth_ms", method="eager", batch=b,
                                              dtype=dtype)["value"] for b in batches}
        for method, pts in chart.data["series"].items():
            assert pts == [(b, gpu("cuda_graph_decode", "step_ms", method=method, batch=b, dtype=dtype,
                                   readback=False)["value"]) for b, _ in pts]
        for method, pts in chart.data["bounds"].items():
            assert pts == [(b, gpu("ceilings", "bound_ms", method=method, batch=b, dtype=dtype)["value"])
                           for b, _ in pts]
    # small multiples on a linear axis: one panel per batch, no log scale under the bars
    assert all(f"batch {b}, float32" in drawn["chart-step-float32"].svg for b in (1, 8, 64))
    assert "log" not in drawn["chart-step-float32"].svg


def test_amdahl_section_shows_both_predictions_as_stored(gpu_html: str) -> None:
    t = table(gpu_html, id="amdahl-table")
    r = row(t, "gpt2_decode_step")
    assert r[6][0] == fmt(1.0, "x") and r[7][0] == fmt(gpu("amdahl", "predicted_speedup_launch")["value"], "x")
    assert r[8][0] == fmt(gpu("amdahl", "measured_speedup")["value"], "x") and r[3][0] == "203 → 147"


def test_environment_shows_label_real_host_load_and_cache(gpu_html: str) -> None:
    env = [t for t in tables(gpu_html) if t["rows"] and t["rows"][0][0][0] == "field"][0]
    kv = {r[0][0]: r[1][0] for r in env["rows"][1:]}
    assert kv["Label"] == "fixture-label" and kv["Host"] == "fixture-host"
    assert kv["Host load at end"] == "[1.5, 0.8, 0.4]" and kv["Compile cache at start"] == "warm"
    assert kv["GPU"] == "NVIDIA H200 (test fixture)" and kv["cuDNN"] == "91300"


# ---------------------------------------------------------------------------- every committed reference run

@pytest.mark.parametrize("run_dir", REFERENCE_RUNS, ids=lambda p: p.name)
def test_every_committed_run_shows_only_stored_figures(tmp_path: Path, run_dir: Path) -> None:
    data = json.loads((run_dir / "results.json").read_text())
    site = render_site([run_dir], tmp_path)
    assert len(site.runs) == 1 and not site.skipped
    html = site.pages[0].read_text()
    page = site.run_pages[0]
    drawn = {c.id: c for s in page.sections for c in s.charts}
    ids = {r["id"]: r for r in data["experiments"] if r["status"] == "OK"}
    if "compile_cost" in ids:
        t = table(html, id="compile-break-even")
        for m in (m for m in ids["compile_cost"]["metrics"] if m["name"] == "break_even_calls"):
            phase, target = m["params"]["phase"], m["params"]["target"]
            cell = [r for r in t["rows"] if r[0][0] == target and r[1][0] == phase][0][3][0]
            assert cell == ("never (no saving)" if m["value"] is None else fmt(m["value"], "calls"))
            assert drawn[f"chart-compile-{target}"].data["break_even"][phase] == m["value"]
    if "cuda_graph_decode" in ids:
        t = table(html, id="method-costs")
        for m in (m for m in ids["cuda_graph_decode"]["metrics"] if m["name"] == "setup_s"):
            p = m["params"]
            r = [r for r in t["rows"] if [c[0] for c in r[:3]] == [p["method"], str(p["batch"]), p["dtype"]]][0]
            step = stored(data, "cuda_graph_decode", "step_ms", readback=False, **p)["value"]
            assert r[3][0] == fmt(m["value"], "s") and r[4][0].startswith(fmt(step, "ms"))
            be = [b for b in ids["cuda_graph_decode"]["metrics"] if b["name"] == "break_even_steps"
                  and b["params"] == p]
            if not be:  # a run made before cuda_graph_decode stored it: shown as such, never recomputed
                assert r[7][0] == "not stored"
            else:
                assert r[7][0] == ("never (no saving)" if be[0]["value"] is None else fmt(be[0]["value"], "steps"))
        for dtype in {m["params"]["dtype"] for m in ids["cuda_graph_decode"]["metrics"] if "dtype" in m["params"]}:
            floor = drawn[f"chart-step-{dtype}"].data["floor"]  # batch -> ceilings' stored floor
            batches = sorted({m["params"]["batch"] for m in ids["cuda_graph_decode"]["metrics"]
                              if m["name"] == "step_ms" and m["params"].get("dtype") == dtype})
            assert sorted(floor) == batches
            for b in batches:
                assert floor[b] == stored(data, "ceilings", "bound_bandwidth_ms", method="eager", batch=b,
                                          dtype=dtype)["value"]
    if "ceilings" in ids:
        t = table(html, id="bounds-table")
        for m in (m for m in ids["ceilings"]["metrics"] if m["name"] == "measured_over_bound"):
            p = m["params"]
            r = [r for r in t["rows"] if [c[0] for c in r[:3]] == [p["dtype"], p["method"], str(p["batch"])]][0]
            measured = stored(data, "ceilings", "measured_ms", **p)["value"]
            assert r[9][0] == fmt(measured, "ms") and r[10][0] == fmt(m["value"], "x")


# ---------------------------------------------------------------------------- the comparison page

def test_compare_page_gives_every_run_a_baseline_or_the_reason_it_has_none(site) -> None:
    page = (site.out / "compare.html").read_text()
    # the newer fixture against the previous run of its host and profile; the older one, which has no earlier run,
    # against the newest other run of its profile; the smoke run, alone in its profile, says so
    assert [(c.a.label, c.b.label) for c in site.comparisons] == [("gpu-fixture-older", "gpu-fixture"),
                                                                  ("gpu-fixture", "gpu-fixture-older")]
    assert texts(page, "no-baseline") == ["cpu-smoke : no baseline, no other run of profile smoke among the runs "
                                          "rendered: nothing to set it against (a run of the same profile, from this "
                                          "host or another, would be)"]
    assert texts(page, "baseline-why") == [
        "Baseline: the previous run of host fixture-host (fixture CPU, 16 cores; NVIDIA H200 (test fixture), driver "
        "580.159.04) with profile gpu.",
        "Baseline: no earlier run of host fixture-host (fixture CPU, 16 cores; NVIDIA H200 (test fixture), driver "
        "580.159.04) with profile gpu: the newest other run of profile gpu."]
    # wide tables scroll inside their container instead of being clipped by the page
    assert page.count("<table") == page.count('<div class="table-wrap"><table')
    assert re.search(r"\.table-wrap \{[^}]*overflow-x:auto", page)
    html = page.split('id="cmp-2"', 1)[1]
    why = [t for t in tables(html) if t["rows"] and [c[0] for c in t["rows"][0]] == ["field", "A", "B"]][0]
    moved = {r[0][0]: (r[1][0], r[2][0]) for r in why["rows"][1:]}
    assert moved["compile cache at start"] == ("warm", "cold") and "host load at end" in moved
    metrics = [t for t in tables(html) if t["rows"] and [c[0] for c in t["rows"][0]][:3] == ["mark", "experiment",
                                                                                             "metric"]]
    graph = [r for r in metrics[0]["rows"][1:] if r[2][0] == "step_ms" and "method=graph, batch=64" in r[3][0]]
    assert graph and graph[0][0][0] == "worse" and graph[0][6][0] == fmt(1.5)
    every = metrics[-1]["rows"][1:]
    setup = [r for r in every if r[2][0] == "setup_s"][0]
    assert setup[0][0] == "not comparable" and setup[7][0] == "compile_cache.state differs: warm vs cold"


def test_baseline_chooses_what_the_site_compares_against(tmp_path: Path, capsys) -> None:
    root = lay_out_runs(tmp_path / "runs")
    runs = [root / "cpu-smoke", root / "gpu-fixture"]
    site = render_site(runs, tmp_path / "site", baseline=str(root / "cpu-smoke"))
    assert [(c.a.label, c.b.label) for c in site.comparisons] == [("cpu-smoke", "gpu-fixture")]
    assert "--baseline" in (tmp_path / "site" / "compare.html").read_text()
    assert lab_main(["report", str(root), "--out", str(tmp_path / "s2"), "--baseline", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: --baseline nope: no such run among cpu-smoke, gpu-fixture, gpu-fixture-older"
    assert not (tmp_path / "s2" / "index.html").exists()


# ---------------------------------------------------------------------------- robustness, escaping, plumbing

def test_not_run_section_lists_records_parts_and_failures(gpu_html: str, cpu_html: str) -> None:
    t = table(gpu_html, id="not-run-table")
    assert [c[0] for c in t["rows"][1]][:2] == ["selection", "not_implemented"]
    parts = table(gpu_html, id="skipped-table")
    assert [c[0] for c in parts["rows"][1][:3]] == ["cuda_graph_decode", "max-autotune-no-cudagraphs", "flag_off"]
    failed = table(gpu_html, id="failed-table")
    assert failed["rows"][1][0][0] == "graph_hazards" and gpu_fixture.SCRIPT_ERROR in failed["rows"][1][2][0]
    expected = [(r["id"], r["reason"]["code"], r["reason"]["message"]) for r in CPU_RESULTS["experiments"]
                if r["status"] == "NOT_RUN"]
    assert [tuple(c[0] for c in r) for r in table(cpu_html, id="not-run-table")["rows"][1:]] == expected
    skipped = [(r["id"], s["item"], s["code"], s["message"]) for r in CPU_RESULTS["experiments"] for s in r["skipped"]]
    assert [tuple(c[0] for c in r) for r in table(cpu_html, id="skipped-table")["rows"][1:]] == skipped


def test_dynamo_counts_with_reasons(gpu_html: str) -> None:
    ro = row(table(gpu_html, caption="Compiled decode step"), "reduce-overhead")
    assert [c[0] for c in ro[1:5]] == ["1", "0", "0", "1"] and "mutated inputs" in ro[5][0]
    rc = table(gpu_html, caption="One function, 12 batch sizes")
    assert "torch._dynamo.config.recompile_limit = 8" in rc["caption"]


def test_strings_from_results_are_escaped(site, gpu_html: str) -> None:
    for page in site.pages + [site.index, site.out / "compare.html"]:
        assert "<script" not in page.read_text().lower(), page
    assert "&lt;script&gt;alert(" in gpu_html and "&lt;data-dependent&gt;" in gpu_html


def test_every_experiment_shows_its_metrics_generically(gpu_html: str, cpu_html: str) -> None:
    cache = table(gpu_html, caption="cache_MiB")  # kv_cache_sweep: an experiment with no section of its own
    assert [c[0] for c in cache["rows"][1]] == ["256", fmt(256 * 0.07, "MiB")]
    for rec in GPU["experiments"] + CPU_RESULTS["experiments"]:
        assert f'id="exp-{rec["id"]}"' in (gpu_html if rec in GPU["experiments"] else cpu_html)


def test_charts_are_inline_svg_with_plain_labels(gpu_html: str, cpu_html: str) -> None:
    for chart_id in ("chart-step-float32", "chart-step-bfloat16", "chart-setup", "chart-compile-decode_core",
                     "chart-fusion", "chart-recompiles", "chart-amdahl"):
        assert re.search(f'<figure class="chart" id="{chart_id}">\\s*<svg', gpu_html), chart_id
    assert "mathdefault" not in gpu_html
    assert 'id="chart-recompiles"' in cpu_html and "chart-step" not in cpu_html


def test_pages_need_no_network(site) -> None:
    for page in site.pages + [site.index]:
        html = page.read_text()
        assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html), page
        assert "@import" not in html and "url(http" not in html


@pytest.mark.parametrize("content, expected", [
    ('{"schema": 99, "run": {}, "manifest": {}, "experiments": []}', "unknown results schema 99"),
    ('{"schema": 1, "run": {"profile": "x", "started_at": ""}, "manifest": {}, '
     '"experiments": [{"id": "a", "status": "OK", "metrics": [], "duration_s": 1}]}', "missing field"),
    ("{not json", "not valid JSON"),
])
def test_bad_input_is_one_line_naming_the_file_and_others_still_render(tmp_path: Path, content: str,
                                                                       expected: str, capsys) -> None:
    shutil.copytree(FIXTURES / "report_runs" / "cpu-smoke", tmp_path / "runs" / "cpu-smoke")
    bad = tmp_path / "runs" / "bad" / "results.json"
    bad.parent.mkdir()
    bad.write_text(content)
    assert lab_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if str(bad) in line]
    assert len(lines) == 1 and expected in lines[0] and lines[0].startswith("error: ")
    index = (tmp_path / "site" / "index.html").read_text()
    assert str(bad) in index and expected in index.replace("&#39;", "'")
    assert "cpu-smoke" in index and (tmp_path / "site" / "run-cpu-smoke.html").exists()


@pytest.mark.slow
def test_a_run_that_cannot_be_rendered_is_listed_not_fatal(tmp_path: Path, monkeypatch) -> None:
    def fragile(results):
        if results.run.profile == "gpu":
            raise RuntimeError("boom <b>")
        return Section("fragile", "Fragile")

    monkeypatch.setattr(build, "SECTIONS", [fragile] + build.SECTIONS)
    root = lay_out_runs(tmp_path / "runs")
    site = build.render_site([root / "cpu-smoke", root / "gpu-fixture"], tmp_path / "site")
    assert [r.name for r in site.runs] == ["cpu-smoke"]
    assert any("gpu-fixture/results.json: could not be rendered (RuntimeError: boom <b>)" in s.reason
               for s in site.skipped)
    assert "boom &lt;b&gt;" in site.index.read_text()


def test_a_module_registers_a_section_with_one_line(tmp_path: Path, monkeypatch) -> None:
    def sweep(results):
        return Section("sweep", "A sweep of its own", intro=f"{len(results.experiments)} records")

    monkeypatch.setattr(build, "SECTIONS", build.SECTIONS + [sweep])
    site = build.render_site([FIXTURES / "report_runs" / "cpu-smoke"], tmp_path)
    html = site.pages[0].read_text()
    assert '<a href="#sweep">A sweep of its own</a>' in html and f"{len(CPU_RESULTS['experiments'])} records" in html


@pytest.mark.slow
def test_cli_defaults_to_manifests_and_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert lab_main(["report"]) == 2
    assert "no run given" in capsys.readouterr().err
    gpu_fixture.write(tmp_path / "manifests" / "reference" / "h200")
    (tmp_path / "runs").mkdir()
    shutil.copytree(FIXTURES / "report_runs" / "cpu-smoke", tmp_path / "runs" / "cpu-smoke")
    assert lab_main(["report"]) == 0
    assert "site/index.html: 2 run(s), 0 skipped" in capsys.readouterr().out
    runs, _ = load_runs([tmp_path / "manifests"])
    assert runs[0].name == "reference/h200" and (tmp_path / "site" / "run-reference-h200.html").exists()


def test_report_needs_no_torch() -> None:
    """The report and compare render on a laptop that has the results but not the lab's torch."""
    code = ("import sys, report.site.build, lab.commands.report, lab.commands.compare, report.pages.compare_text; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fmt() -> None:
    assert fmt(None) == "—" and fmt(True) == "yes" and fmt(1234567) == "1,234,567"
    assert fmt(3.14159, "ms") == "3.14 ms" and fmt(0.000123, "s") == "1.23e-04 s" and fmt(4260.0) == "4,260"
    assert fmt(float("nan")) == "nan" and fmt(2, "count") == "2" and fmt(0.00413, "ms") == "0.00413 ms"


def test_fusion_table_fills_per_n_ops_ceiling(gpu_html: str) -> None:
    t = table(gpu_html, caption="Compiled (fused) chain over eager")
    cache16 = [r for r in t["rows"] if r[0][0] == "16" and r[1][0] == "cache"][0]
    assert cache16[3][0] == "16 x"
    assert cache16[2][0] == fmt(gpu("fusion", "speedup", n_ops=16, residency="cache")["value"], "x")


def test_the_committed_runs_load() -> None:
    assert {p.name for p in REFERENCE_RUNS} >= {"cpu-2026-12-02-full", "h200-2026-12-02-gpu"}
    for p in REFERENCE_RUNS:
        load(p)
