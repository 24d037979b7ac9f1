"""The report rendered from fixture runs, checked for what a reader sees (not only that files exist)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.costs import break_even_calls
from report import render_site
from report.discover import load_runs
from report.tables import fmt
from report_helpers import FIXTURES, gpu_fixture, lay_out_runs, row, table, tables

CPU_RESULTS = json.loads((FIXTURES / "report_runs" / "cpu-smoke" / "results.json").read_text())
GPU = gpu_fixture.build()


def gpu_metric(exp: str, name: str, **params: object) -> dict:
    rec = next(r for r in GPU["experiments"] if r["id"] == exp)
    found = [m for m in rec["metrics"] if m["name"] == name and all(m["params"].get(k) == v for k, v in params.items())]
    assert len(found) == 1, (exp, name, params, len(found))
    return found[0]


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


def test_index_lists_both_runs_and_the_skipped_file(site) -> None:
    assert sorted(r.name for r in site.runs) == ["cpu-smoke", "gpu-fixture"]
    html = site.index.read_text()
    runs = [t for t in tables(html) if t["rows"] and t["rows"][0][0][0] == "run"][0]
    names = [r[0][0] for r in runs["rows"][1:]]
    assert names == ["cpu-smoke", "gpu-fixture"]
    gpu_row = row(runs, "gpu-fixture")
    assert "NVIDIA H200 (test fixture)" in gpu_row[4][0] and gpu_row[5][0] == "2.11.0+cu130"
    assert [c[0] for c in gpu_row[8:11]] == ["8", "1", "1"]  # OK, NOT_RUN, FAILED
    assert len(site.skipped) == 1 and site.skipped[0].path.endswith("malformed/results.json")
    assert "malformed/results.json: not valid JSON" in html
    assert 'href="compare.html"' in html and (site.out / "compare.html").exists()


def test_speedup_table_has_medians_spread_and_speedup(gpu_html: str) -> None:
    t = table(gpu_html, caption="Median ms per decode step, dtype float32, no readback")
    assert [c[0] for c in t["rows"][0]] == ["method", "batch 1", "batch 8", "batch 64"]
    assert [r[0][0] for r in t["rows"][1:]] == ["eager", "graph", "compile-default", "reduce-overhead",
                                                "reduce-overhead-static", "compile+graph"]
    m = gpu_metric("cuda_graph_decode", "step_ms", method="graph", batch=1, readback=False)
    s = gpu_metric("cuda_graph_decode", "speedup_vs_eager", method="graph", batch=1, readback=False)
    text, cls = row(t, "graph")[1]
    assert text.startswith(f"{fmt(m['value'], 'ms')} ")
    assert f"{fmt(s['value'])}× vs eager" in text and f"IQR {m['spread']['rel_iqr'] * 100:.1f}% · n=25" in text
    assert "good" in cls
    assert "bad" in row(t, "compile-default")[1][1]  # slower than eager at batch 1


def test_noisy_cell_is_flagged(gpu_html: str) -> None:
    t = table(gpu_html, caption="Median ms per decode step, dtype float32, no readback")
    text, cls = row(t, "reduce-overhead")[2]
    assert "noisy" in cls and "⚠" in text
    quiet_text, quiet_cls = row(t, "reduce-overhead")[1]
    assert "noisy" not in quiet_cls and "⚠" not in quiet_text


def test_ceilings_show_which_bound_binds_and_distance(gpu_html: str) -> None:
    t = table(gpu_html, caption="Per method and batch")
    by_key = {(r[1][0], r[2][0]): r for r in t["rows"][1:]}
    eager1 = by_key[("eager", "1")]
    assert eager1[8][0] == "launch" and "binds" in eager1[5][1] and "binds" not in eager1[6][1]
    assert by_key[("graph", "64")][8][0] == "compute"
    ratio = gpu_metric("ceilings", "measured_over_bound", method="eager", batch=1)["value"]
    assert eager1[10][0] == fmt(ratio, "x")
    host = table(gpu_html, caption="Ceilings measured on this host")
    assert ["bandwidth_GBps", "kind=copy", "4,260 GBps"] == [c[0] for c in row(host, "bandwidth_GBps")]


def test_costs_and_break_even(gpu_html: str) -> None:
    t = table(gpu_html, caption="First-call cost of each method")
    setup = gpu_metric("cuda_graph_decode", "setup_s", method="graph", batch=1)["value"]
    eager = gpu_metric("cuda_graph_decode", "step_ms", method="eager", batch=1, readback=False)["value"]
    graph = gpu_metric("cuda_graph_decode", "step_ms", method="graph", batch=1, readback=False)["value"]
    graph1 = [r for r in t["rows"] if r[0][0] == "graph" and r[1][0] == "1"][0]
    assert graph1[6][0] == fmt(break_even_calls(setup, eager, graph))
    slow = [r for r in t["rows"] if r[0][0] == "compile-default" and r[1][0] == "1"][0]
    assert slow[6][0] == "never (no saving)"
    cc = table(gpu_html, caption="torch.compile first call, cold vs warm")
    assert [c[0] for c in row(cc, "cold")[:3]] == ["cold", "decode_step", "25.7 s"]
    assert "graph_pool_MiB" in [c[0] for c in table(gpu_html, caption="Manual CUDA graph")["rows"][0]]


def test_dynamo_counts_with_reasons(gpu_html: str) -> None:
    t = table(gpu_html, caption="Compiled decode step")
    ro = row(t, "reduce-overhead")
    assert [c[0] for c in ro[1:5]] == ["1", "0", "0", "1"]
    assert "mutated inputs" in ro[5][0]
    gb = table(gpu_html, caption="torch._dynamo.explain")
    assert "Tensor.item() <data-dependent>" in row(gb, "uses_item")[4][0]
    rc = table(gpu_html, caption="One function, 12 batch sizes")
    assert "torch._dynamo.config.recompile_limit = 8" in rc["caption"]
    assert [c[0] for c in row(rc, "False")] == ["False", "8", "8", "yes"]


def test_correctness_checks_listed(gpu_html: str) -> None:
    t = table(gpu_html, caption="Every correctness check")
    failed = [r for r in t["rows"] if r[1][0] == "bf16_tokens_equal"][0]
    assert failed[3] == ("FAIL", "bad") and "near-tie" in failed[4][0]
    assert sum(r[3][0] == "pass" for r in t["rows"]) == 15


def test_not_run_section_lists_records_parts_and_failures(gpu_html: str, cpu_html: str) -> None:
    t = table(gpu_html, id="not-run-table")
    assert [c[0] for c in t["rows"][1]][:2] == ["selection", "not_implemented"]
    parts = table(gpu_html, id="skipped-table")
    assert [c[0] for c in parts["rows"][1][:3]] == ["cuda_graph_decode", "max-autotune-no-cudagraphs", "flag_off"]
    assert "--set cuda_graph_decode.max_autotune=true" in parts["rows"][1][3][0]
    failed = table(gpu_html, id="failed-table")
    assert failed["rows"][1][0][0] == "graph_hazards"
    assert gpu_fixture.SCRIPT_ERROR in failed["rows"][1][2][0]
    # The CPU run: every NOT_RUN record of the results file, with its code and sentence, nothing dropped.
    expected = [(r["id"], r["reason"]["code"], r["reason"]["message"]) for r in CPU_RESULTS["experiments"]
                if r["status"] == "NOT_RUN"]
    assert {e[0] for e in expected} == {"cuda_graph_decode", "graph_cost", "graph_hazards", "manual_graph_recipe"}
    cpu_rows = [tuple(c[0] for c in r) for r in table(cpu_html, id="not-run-table")["rows"][1:]]
    assert cpu_rows == expected
    # ... and every part an OK record skipped (e.g. ceilings' graph-node launch cost without CUDA)
    skipped = [(r["id"], s["item"], s["code"], s["message"]) for r in CPU_RESULTS["experiments"] for s in r["skipped"]]
    assert ("ceilings", "launch_us_per_op graph_node", "no_cuda") in {s[:3] for s in skipped}
    assert [tuple(c[0] for c in r) for r in table(cpu_html, id="skipped-table")["rows"][1:]] == skipped


def test_strings_from_results_are_escaped(site, gpu_html: str) -> None:
    for page in site.pages + [site.index, site.out / "compare.html"]:
        html = page.read_text()
        assert "<script" not in html.lower(), page  # none of ours, and none injected
    assert "&lt;script&gt;alert(" in gpu_html
    assert "&lt;data-dependent&gt;" in gpu_html


def test_every_experiment_shows_its_metrics_generically(gpu_html: str, cpu_html: str) -> None:
    cache = table(gpu_html, caption="cache_MiB")  # kv_cache_sweep: an experiment with no section of its own
    assert [c[0] for c in cache["rows"][0]] == ["max_len", "value"]
    assert [c[0] for c in cache["rows"][1]] == ["256", fmt(256 * 0.07, "MiB")]
    for rec in GPU["experiments"] + CPU_RESULTS["experiments"]:
        html = gpu_html if rec in GPU["experiments"] else cpu_html
        assert f'id="exp-{rec["id"]}"' in html
    decode = [t for t in tables(cpu_html) if t["caption"] == "op_nodes_first_graph"]
    assert decode and decode[0]["rows"][0][0][0] == "step"


def test_charts_are_inline_svg_with_plain_labels(gpu_html: str, cpu_html: str) -> None:
    for chart_id in ("chart-step-float32", "chart-setup", "chart-compile-decode_step", "chart-fusion",
                     "chart-recompiles"):
        m = re.search(f'<figure class="chart" id="{chart_id}">\\s*<svg', gpu_html)
        assert m, chart_id
    assert "mathdefault" not in gpu_html  # tick labels are plain numbers
    assert 'id="chart-recompiles"' in cpu_html and "chart-step" not in cpu_html
    assert "cuda_graph_decode is NOT_RUN (no_cuda)" in cpu_html  # the empty speedup section says why


def test_pages_need_no_network(site) -> None:
    for page in site.pages + [site.index]:
        html = page.read_text()
        assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html), page
        assert "@import" not in html and "url(http" not in html


def test_environment_summary_and_full_manifest(gpu_html: str, cpu_html: str) -> None:
    env = [t for t in tables(gpu_html) if t["rows"] and t["rows"][0][0][0] == "field"][0]
    kv = {r[0][0]: r[1][0] for r in env["rows"][1:]}
    assert kv["GPU"] == "NVIDIA H200 (test fixture)" and kv["Triton"] == "3.6.0" and kv["cuDNN"] == "91300"
    assert kv["Note"] == gpu_fixture.FIXTURE_NOTE
    full = table(cpu_html, caption="The whole manifest, flattened")
    assert "compiler_settings.inductor.cpp.threads" in [r[0][0] for r in full["rows"]]


def test_compare_page(site) -> None:
    html = (site.out / "compare.html").read_text()
    fields = [t for t in tables(html) if t["rows"] and [c[0] for c in t["rows"][0]] == ["field", "A", "B"]][0]
    diffs = {r[0][0]: (r[1][0], r[2][0]) for r in fields["rows"][1:]}
    assert diffs["torch.version"] == ("2.13.0+cpu", "2.11.0+cu130")
    assert "created_at" not in diffs
    status = [t for t in tables(html) if t["rows"] and t["rows"][0][0][0] == "mark" and t["rows"][0][2][0] == "A"][0]
    rows = {r[1][0]: [c[0] for c in r] for r in status["rows"][1:]}
    assert rows["cuda_graph_decode"][:4] == ["not comparable", "cuda_graph_decode", "NOT_RUN", "OK"]
    assert rows["graph_hazards"][:4] == ["newly failing", "graph_hazards", "NOT_RUN", "FAILED"]
    metrics = [t for t in tables(html) if t["rows"] and [c[0] for c in t["rows"][0]][:3] == ["mark", "experiment",
                                                                                             "metric"]][0]
    same = [r for r in metrics["rows"][1:] if r[1][0] == "graph_breaks" and r[2][0] == "graphs"
            and "uses_item" in r[3][0]]
    assert same and same[0][0][0] == "same"


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
    code = lab_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "site")])
    assert code == 0
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if str(bad) in line]
    assert len(lines) == 1 and expected in lines[0] and lines[0].startswith("error: ")
    index = (tmp_path / "site" / "index.html").read_text()
    assert str(bad) in index and expected in index.replace("&#39;", "'")
    assert "cpu-smoke" in index and (tmp_path / "site" / "run-cpu-smoke.html").exists()


@pytest.mark.slow
def test_a_run_that_cannot_be_rendered_is_listed_not_fatal(tmp_path: Path, monkeypatch) -> None:
    from report import render, sections

    real = sections.speedups

    def fragile(results):
        if results.run.profile == "gpu":
            raise RuntimeError("boom <b>")
        return real(results)

    monkeypatch.setattr(sections, "speedups", fragile)
    site = render.render_site([lay_out_runs(tmp_path / "runs")], tmp_path / "site")
    assert [r.name for r in site.runs] == ["cpu-smoke"]
    reasons = [s.reason for s in site.skipped]
    assert any("gpu-fixture/results.json: could not be rendered (RuntimeError: boom <b>)" in r for r in reasons)
    assert "boom &lt;b&gt;" in site.index.read_text()


@pytest.mark.slow
def test_cli_defaults_to_manifests_and_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert lab_main(["report"]) == 2
    assert "no run given" in capsys.readouterr().err
    gpu_fixture.write(tmp_path / "manifests" / "reference" / "h200")
    lay_out_runs(tmp_path / "elsewhere")
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere" / "cpu-smoke").rename(tmp_path / "runs" / "cpu-smoke")
    assert lab_main(["report"]) == 0
    out = capsys.readouterr().out
    assert "site/index.html: 2 run(s), 0 skipped" in out
    runs, _ = load_runs([tmp_path / "manifests"])
    assert runs[0].name == "reference/h200"
    assert (tmp_path / "site" / "run-reference-h200.html").exists()


def test_report_needs_no_torch() -> None:
    """The report renders on a laptop that has the results but not the lab's torch."""
    code = "import sys, report.render, lab.commands.report, lab.commands.compare; print('torch' in sys.modules)"
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
    assert cache16[2][0] == fmt(gpu_metric("fusion", "speedup", n_ops=16, residency="cache")["value"], "x")
