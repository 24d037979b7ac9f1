"""The sweeps (issue 14): their rules and arithmetic as pure functions, their CPU paths end to end in the smoke
profile (CUDA-only parts listed as skipped with a code), and their report sections and compile-trace pages."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lab.contract import catalogue, profiles
from lab.step import decode
from lab.run import runner
from lab.contract import metrics as M
from lab.experiments import context_scaling as cs
from lab.experiments import data_dependent_branch as ddb
from lab.experiments import graph_buckets as gb
from lab.experiments import model_scaling as ms
from lab.experiments import peer_generate as pg
from lab.run.manifest import REPO_ROOT
from lab.contract import intervals
from lab.contract.names import Method
from lab.contract.reasons import Code
from lab.contract.results import load
from lab.experiments.common.sweep import SHAPES, Budget, parameters, random_weights

SWEEPS = ("peer_generate", "model_scaling", "context_scaling", "graph_buckets", "data_dependent_branch")


# ---------------------------------------------------------------------------- catalogue and profiles

def test_sweeps_are_catalogued_and_only_sweep_profiles_run_them_by_default() -> None:
    assert tuple(s.id for s in catalogue.CATALOGUE if s.sweep) == SWEEPS == profiles.SWEEPS
    assert not {s.id for s in catalogue.resolve(None, sweeps=False)} & set(SWEEPS)
    assert {s.id for s in catalogue.resolve(None, sweeps=True)} >= set(SWEEPS)
    sweep = profiles.get("gpu-sweep")
    assert sweep.device == "cuda" and sweep.experiments == ("sentinel", *SWEEPS, "sentinel_end")
    assert profiles.get("smoke").sweeps and not profiles.get("gpu").sweeps and not profiles.get("cpu").sweeps
    opts = runner.resolve_all(catalogue.resolve(list(SWEEPS)), sweep)
    assert opts["model_scaling"].sizes == ("gpt2-124M", "gpt2-355M", "gpt2-774M", "gpt2-1.5B")
    assert opts["context_scaling"].max_lens[-1] == 2048 and opts["graph_buckets"].max_batch == 64
    assert Method.EAGER in opts["model_scaling"].methods and Method.COMPILE_GRAPH in opts["model_scaling"].methods


def test_gpu_sweep_without_cuda_is_not_run_no_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    res = runner.run(profiles.get("gpu-sweep"), tmp_path)
    assert [(r.id, r.status, r.reason.code) for r in res.experiments] == [(i, "NOT_RUN", "no_cuda") for i in ("sentinel", *SWEEPS, "sentinel_end")]


# ---------------------------------------------------------------------------- shared pieces

def test_shapes_and_random_weights() -> None:
    assert 123e6 < parameters(SHAPES["gpt2-124M"]) < 126e6
    assert 1.50e9 < parameters(SHAPES["gpt2-1.5B"]) < 1.60e9
    spec = SHAPES["tiny-4L"]
    w32 = random_weights(spec, "cpu", "float32")
    again = random_weights(spec, "cpu", "float32")
    w16 = random_weights(spec, "cpu", "bfloat16")
    assert w32.n_layer == 4 and w32.layers[0].attn_w.shape == (3 * 96, 96) and w32.layers[0].fc2_w.shape == (96, 384)
    assert torch.equal(w32.wte, again.wte) and w16.dtype == torch.bfloat16
    assert torch.equal(w16.layers[1].fc_w, w32.layers[1].fc_w.to(torch.bfloat16))  # the same numbers, rounded
    resid = w32.layers[0].proj_w.std().item() / w32.layers[0].attn_w.std().item()
    assert resid == pytest.approx(1 / math.sqrt(2 * 4), rel=0.15)  # GPT-2's scaled residual projections
    tokens = decode.generate_fixed(w32, torch.tensor([[1, 2, 3]]), 12)
    assert len(set(tokens[0].tolist())) > 3  # the init makes greedy decoding vary


def test_budget_counts_and_seconds() -> None:
    b = Budget(compiles=1)
    assert b.why_not() is None
    b.spend()
    assert "max_compiles" in b.why_not()
    late = Budget(seconds=10.0, start=time.perf_counter() - 11)
    assert "budget_s" in late.why_not() and Budget().why_not() is None


# ---------------------------------------------------------------------------- the rules of each experiment

def test_model_scaling_rule() -> None:
    iv = intervals.Interval
    assert ms.gain_trend(iv(4.8, 5.2), iv(1.9, 2.1)) == "shrinks" and ms.gain_trend(iv(1.9, 2.1), iv(4.8, 5.2)) == "grows"
    # overlapping intervals hold, however far apart the medians: the rule is the intervals', not a 5% threshold
    assert ms.gain_trend(iv(1.5, 2.5), iv(2.4, 3.0)) == "holds"
    assert ms.gain_trend(None, iv(1.0, 1.1)) == "unknown"
    assert ms.priority(("a", "b"), ("float32", "bfloat16"), (8, 1))[:3] == [(1, "float32", "a"), (1, "float32", "b"),
                                                                           (1, "bfloat16", "a")]
    shrink = {"method": Method.GRAPH, "dtype": "float32", "batch": 1, "first": 5.4, "last": 1.9, "small": "gpt2-124M",
              "large": "gpt2-1.5B", "trend": "shrinks"}
    grow = dict(shrink, batch=8, first=2.0, last=2.5, trend="grows")
    assert "data agree with" in ms.sentence([shrink]) and "5.40x (gpt2-124M) to 1.90x (gpt2-1.5B)" in ms.sentence([shrink])
    assert "partly agree" in ms.sentence([shrink, grow]) and "1 of 2" in ms.sentence([shrink, grow])
    assert "do not agree" in ms.sentence([grow]) and "cannot be judged" in ms.sentence([])


def test_context_crossover_rule() -> None:
    at, how = cs.crossover([256, 512, 1024], [0.5, 0.8, 1.6])
    assert how == "crosses" and at == pytest.approx(2 ** 9.25)
    assert cs.crossover([256, 512], [0.3, 0.6]) == (None, "always")
    assert cs.crossover([256, 512], [1.2, 0.6]) == (None, "never")
    assert "about 609 slots" in cs.phrase(16, "graph", at, how, [256, 512, 1024], [0.5, 0.8, 1.6])
    assert "every length up to 512" in cs.phrase(1, "graph", None, "always", [256, 512], [0.3, 0.6])
    w = random_weights(SHAPES["tiny-2L"], "cpu", "float32")
    longer = cs.extend_positions(w, 200)
    assert longer.wpe.shape == (200, 64) and torch.equal(longer.wpe[:128], w.wpe) and cs.extend_positions(w, 64) is w


def test_bucket_ladders_and_rule() -> None:
    assert gb.ladder("vllm", 64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]  # vLLM's default, cut at 64
    assert gb.ladder("pow2", 64) == [1, 2, 4, 8, 16, 32, 64] and gb.ladder("pow2", 48)[-1] == 48
    assert gb.ladder("per-size", 5) == [1, 2, 3, 4, 5]
    assert gb.bucket([1, 2, 4, 8], 3) == 4 and gb.bucket([1, 2, 4, 8], 8) == 8
    with pytest.raises(ValueError):
        gb.bucket([1, 2], 3)
    assert gb.waste([1, 2, 3], [1, 2, 3]) == 0 and gb.waste([1, 4], [3]) == pytest.approx(0.25)
    assert gb.expected_ms([2, 4], {2: 1.0, 4: 3.0}, [1, 2, 3]) == pytest.approx(5 / 3)
    assert gb.winner({"a": 1.0, "b": 0.4}, {"a": 1, "b": 2}, {"a": 9, "b": 3}) == "b"
    assert gb.winner({"a": None, "b": None}, {"a": 1.0, "b": 1.01}, {"a": 9, "b": 3}) == "b"  # tie: fewer graphs
    assert gb.winner({"a": None, "b": None}, {"a": 1.0, "b": 1.5}, {"a": 9, "b": 3}) == "a"


def test_eos_rewrite_gives_the_host_checked_tokens(tiny) -> None:
    _, w = tiny
    prompt = torch.tensor([[5, 6, 7], [8, 9, 10]])
    plain = decode.generate_fixed(w, prompt, 16)
    eos = int(plain[0, 5])
    outs = {}
    for version, step in ddb.STEPS.items():
        state = ddb.new_eos_state(w, 2, 32, eos)
        decode.prefill(state, w, prompt)
        state.done.copy_(state.tok == state.eos)  # as the experiment starts a run: the prefill's token counts too
        with torch.no_grad():
            for _ in range(15):
                step(state, w)
        outs[version] = state.out.clone()
    assert torch.equal(outs[ddb.HOST], outs[ddb.WHERE])
    row0 = outs[ddb.WHERE][0, 3:]
    first = int((row0 == eos).nonzero()[0])
    assert (row0[first:16] == eos).all()  # once finished, the row keeps emitting EOS (16 tokens generated)
    assert ddb._stopped_at(torch.tensor([[0, 1, 9, 9], [0, 9, 9, 9]]), 1, 9) == 2
    assert ddb._stopped_at(torch.tensor([[0, 1, 2]]), 1, 9) is None


def test_transformers_generate_variants_on_the_lab_weights(tiny) -> None:
    model, w = tiny
    for variant in ("dynamic", "static", "static+compile", "static+compile-default"):
        cfg = pg.generation_config(variant, 8, "cpu")
        assert cfg.eos_token_id is None and cfg.max_new_tokens == 8
        assert (cfg.cache_implementation == "static") == (variant != "dynamic")
        if variant in pg.COMPILED:
            assert cfg.compile_config.mode == ("reduce-overhead" if variant == "static+compile" else "default")
            assert cfg.compile_config._compile_all_devices  # off CUDA it compiles only when asked to
        else:
            assert cfg.disable_compile
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]
    out = pg.run_variant(model, "static", {2: prompts}, new_tokens=6, warmup_calls=1, rounds=2)["2"]
    assert out["error"] is None and len(out["ms_per_token"]) == 2 * 5 and len(out["steady_calls_s"]) == 2
    assert out["tokens"] == decode.generate_fixed(w, torch.tensor(prompts), 6).tolist()
    assert model.generation_config.eos_token_id is not None or model.config.eos_token_id is None  # restored
    assert pg.weights_digest(model) == pg.weights_digest(model)


# ---------------------------------------------------------------------------- end to end (smoke) and the report

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweeps") / "run"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", ",".join(SWEEPS),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


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
    from report.render import render_site

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


def test_a_crashed_transformers_child_keeps_its_finished_batches(tiny, monkeypatch, tmp_path: Path) -> None:
    """The H200 saw a crash in static + reduce-overhead: the batches done before it stand, the others are FAILED
    with how the process ended, and the experiment goes on."""
    import json

    from lab.run.childproc import ChildResult
    from lab.contract.results import Record
    from lab.run.context import Context

    model, _ = tiny
    done = {"1": {"warm_calls_s": [2.0], "steady_calls_s": [0.1], "ms_per_token": [1.0, 1.1], "error": None,
                  "tokens": [[1, 2, 3]]}}

    def crashing_child(target, kwargs, timeout_s, env=None):
        Path(kwargs["partial_path"]).write_text(json.dumps({"digest": pg.weights_digest(model), "batches": done}))
        return ChildResult(target, -11, "SIGSEGV", False, 3.0, None, "", "Segmentation fault")

    monkeypatch.setattr(pg, "run_child", crashing_child)
    ctx = Context(catalogue.BY_ID["peer_generate"], profiles.get("smoke"), None,
                  Record(id="peer_generate", title="", status="OK"), None, None)
    result = pg._variant_results(ctx, model, "static", {1: [[1]], 8: [[1]] * 8})  # smoke isolates "static"
    assert result == done
    failed = [m for m in ctx.record.metrics if m.name == M.OUTCOME.name]
    assert [(m.params["batch"], m.value) for m in failed] == [(8, "FAILED")]
    assert "SIGSEGV" in ctx.record.notes["errors.static.b8"]
    assert [s.code for s in ctx.record.skipped] == [Code.CHILD_DIED] and all(c.passed for c in ctx.record.checks)


def test_capture_child_answers_without_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the gpu-sweep run exercises the capture")
    out = ddb.capture_child(model={}, provenance={}, batch=1, max_len=8, prompt_len=2,
                            result_path=str(tmp_path / "r.json"))
    assert out == {"captured": False, "error": "no CUDA device in the child"}
    assert (tmp_path / "r.json").is_file()


UNITS = {"peer_generate": "median ms per token", "model_scaling": "speedup over eager, x",
         "context_scaling": "cache length, slots", "graph_buckets": "median ms per step",
         "data_dependent_branch": "median ms per step"}


def test_the_committed_smoke_fixture_renders_every_sweep_section(tmp_path: Path) -> None:
    """From stored records alone (no traces folder): a section per sweep with its conclusion, a chart, units."""
    from report import publish, sweeps
    from report.discover import load_runs

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
    assert publish.publish(runs[0], tmp_path) == []  # the fixture keeps no traces: no pages, no error
