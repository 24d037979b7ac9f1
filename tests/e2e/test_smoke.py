"""The smoke profile end to end: whole runs through the real CLI in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path

import pytest

from lab.run.manifest import REPO_ROOT
from lab.contract.results import load
from lab.contract import metrics as M
from lab.experiments import data_dependent_branch as ddb
from lab.contract.names import Method
from lab.contract.reasons import Code
from lab.contract.catalogue import resolve
from report_helpers import repeats

SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """The whole smoke profile, once, through the real CLI in a fresh process: what every test here reads."""
    out = tmp_path_factory.mktemp("smoke") / "run"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_every_experiment_of_the_smoke_profile_records_each_figure_once(smoke_run: Path) -> None:
    """Each ran through Context.metric, which fails an experiment that records a metric twice: every one is OK, or
    NOT_RUN for want of CUDA, and the file holds no metric twice."""
    raw = json.loads((smoke_run / "results.json").read_text())
    assert [r["id"] for r in raw["experiments"]] == [s.id for s in resolve(None, sweeps=True)]
    assert all(r["status"] == "OK" or r["reason"]["code"] == Code.NO_CUDA for r in raw["experiments"]), \
        {r["id"]: r["reason"] for r in raw["experiments"] if r["status"] != "OK"}
    assert not repeats(raw["experiments"])


@pytest.mark.slow
def test_smoke_core_experiments_end_to_end(smoke_run: Path) -> None:
    """The CPU experiments of the core."""
    ids = ("fixed_step_equivalence", "graph_breaks", "recompiles", "decode_recompiles")
    res = load(smoke_run)
    assert {i: res.record(i).status for i in ids} == {i: "OK" for i in ids}
    rc = res.record("recompiles")
    assert rc.metric("limit_hit", dynamic="False").value is True
    assert rc.metric("limit_hit", dynamic="True").value is False
    dr = res.record("decode_recompiles")
    assert dr.metric("compiles", step="fixed", dynamic="False").value == 1
    assert dr.metric("compiles", step="growing", dynamic="False").value > 1
    fe = res.record("fixed_step_equivalence")
    assert all(c.passed for c in fe.checks) and len(fe.checks) >= 8


@pytest.mark.slow
def test_smoke_sweeps_run_and_state_what_they_skip(smoke_run: Path) -> None:
    res = load(smoke_run)
    recs = {r.id: r for r in res.experiments}
    assert {i: recs[i].status for i in SWEEPS} == {i: "OK" for i in SWEEPS}, {i: recs[i].reason for i in SWEEPS}
    for rid in SWEEPS:
        conclusion = recs[rid].metric(M.CONCLUSION.name)
        assert conclusion.value.endswith(".") and recs[rid].notes["conclusion_rule"]
    codes = {(rid, s.code) for rid in SWEEPS for s in recs[rid].skipped}
    assert {("model_scaling", Code.NO_CUDA), ("model_scaling", Code.PROFILE_BUDGET), ("graph_buckets", Code.NO_CUDA),
            ("data_dependent_branch", Code.NO_CUDA), ("peer_generate", Code.NO_CUDA),
            ("context_scaling", Code.DISABLED_IN_PROFILE)} <= codes
    peer = recs["peer_generate"]
    assert {m.params["variant"]: m.value for m in peer.metrics if m.name == M.OUTCOME.name} == {"dynamic": "OK",
                                                                                               "static": "OK"}
    assert all(c.passed for c in peer.checks)  # same weights in the child, same tokens as the lab's step
    assert peer.metric(M.SPEEDUP_VS_PEER.name, method=Method.EAGER, batch=1).value > 0
    branch = recs["data_dependent_branch"]
    assert branch.metric(M.GRAPH_BREAKS.name, version=ddb.HOST).value >= 1
    assert branch.metric(M.GRAPH_BREAKS.name, version=ddb.WHERE).value == 0
    assert branch.metric(M.STEP_COMPILES.name, version=ddb.HOST).value is False
    assert branch.metric(M.STEP_COMPILES.name, version=ddb.WHERE).value is True
    assert all(c.passed for c in branch.checks)
    buckets = recs["graph_buckets"]
    assert buckets.metric(M.WASTE_FRACTION.name, ladder="per-size").value == 0
    assert all(c.passed for c in buckets.checks)
    assert any(m.name == M.CROSSOVER_MAX_LEN.name for m in recs["context_scaling"].metrics)
    scaling = recs["model_scaling"]
    assert {m.params["size"] for m in scaling.metrics if m.name == M.STEP_MS.name} == {"tiny-2L", "tiny-4L"}
    traces = {rid: recs[rid].notes.get("compile_traces", {}) for rid in SWEEPS}
    assert traces["model_scaling"] and traces["data_dependent_branch"]
    for rid, items in traces.items():
        for info in items.values():
            folder = smoke_run / info["path"]
            assert (folder / "summary.json").is_file() and (folder / "metadata.jsonl.gz").is_file()
            assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 200_000  # small enough to commit


@pytest.mark.slow
def test_report_shows_each_sweep_with_chart_conclusion_and_trace_pages(smoke_run: Path, tmp_path: Path) -> None:
    from report.site.build import render_site

    site = render_site([smoke_run], tmp_path / "site")
    html = site.pages[0].read_text()
    res = load(smoke_run)
    for rid in SWEEPS:
        assert f'id="sweep-{rid}"' in html
        assert res.record(rid).metric(M.CONCLUSION.name).value.split(";")[0][:60] in html.replace("&#39;", "'")
    assert html.count('class="chart-svg"') >= 5 and "mathdefault" not in html
    pages = list((tmp_path / "site" / "traces").rglob("index.html"))
    own = [p for p in pages if p.parent.name != "tlparse"]
    assert own and all("Compile trace:" in p.read_text() for p in own)
    for p in own:  # every trace page the run page links to exists
        rel = p.relative_to(tmp_path / "site").as_posix()
        assert f'href="{rel}"' in html
