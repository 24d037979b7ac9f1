"""lab/experiments/peer_generate.py: transformers' generate variants on the lab's weights; a crashed child keeps its finished batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lab.contract import catalogue, intervals, profiles
from lab.step import decode
from lab.contract import metrics as M
from lab.experiments import peer_generate as pg
from lab.contract.reasons import Code


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
    assert out["error"] is None and len(out["steady_calls_s"]) == 2
    assert [len(r) for r in out["ms_per_token"]] == [5, 5]  # one round of samples per timed call
    assert out["tokens"] == decode.generate_fixed(w, torch.tensor(prompts), 6).tolist()
    assert model.generation_config.eos_token_id is not None or model.config.eos_token_id is None  # restored
    assert pg.weights_digest(model) == pg.weights_digest(model)


def test_a_crashed_transformers_child_keeps_its_finished_batches(tiny, monkeypatch, tmp_path: Path) -> None:
    """The H200 saw a crash in static + reduce-overhead: the batches done before it stand, the others are FAILED
    with how the process ended, and the experiment goes on."""
    import json

    from lab.run.childproc import ChildResult
    from lab.contract.results import Record
    from lab.run.context import Context

    model, _ = tiny
    done = {"1": {"warm_calls_s": [2.0], "steady_calls_s": [0.1], "ms_per_token": [[1.0, 1.1]], "error": None,
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


def _ctx():
    from lab.contract.results import Record
    from lab.run.context import Context

    return Context(catalogue.BY_ID["peer_generate"], profiles.get("smoke"), None,
                   Record(id="peer_generate", title="", status="OK"), None, None)


DRIFT = (1.0, 1.5, 0.8, 1.2)  # a host whose speed moves from round to round


def test_speedup_vs_peer_has_its_interval_from_rounds_drawn_on_their_own() -> None:
    """The lab's rounds and transformers' calls were timed one after the other: the interval draws each side's rounds
    on its own (a paired draw would cancel a drift the two sides never shared)."""
    ctx = _ctx()
    eager = [[1.0 * d, 1.0 * d] for d in DRIFT]
    graph = [[0.5 * d, 0.5 * d] for d in DRIFT]
    static = [[2.0 * d, 2.0 * d] for d in DRIFT]
    dynamic = [[3.0, 3.0]] * 4
    pg._compare(ctx, {1: {"eager": eager, "graph": graph}}, {"static": {1: static}, "dynamic": {1: dynamic}})
    p = {"impl": "lab", "method": "eager", "batch": 1, "peer": "static"}  # static is transformers' fastest here
    got = {n: ctx.record.metric(n, **p).value for n in (M.SPEEDUP_VS_PEER.name, *M.SPEEDUP_VS_PEER.interval)}
    apart, paired = intervals.ratio_interval(static, eager, paired=False), intervals.ratio_interval(static, eager)
    assert got[M.SPEEDUP_VS_PEER.name] == pytest.approx(2.0)
    assert (got[M.SPEEDUP_CI_LOW.name], got[M.SPEEDUP_CI_HIGH.name]) == (round(apart.low, 4), round(apart.high, 4))
    assert apart.high - apart.low > paired.high - paired.low
    graph_p = p | {"method": "graph"}
    assert ctx.record.metric(M.SPEEDUP_VS_PEER.name, **graph_p).value == pytest.approx(4.0)
    assert ctx.record.metric(M.SPEEDUP_CI_LOW.name, **graph_p).value is not None


def test_the_conclusion_calls_the_lab_faster_only_where_the_interval_excludes_1() -> None:
    clear, close = _ctx(), _ctx()
    ours = [[1.0, 1.01], [0.99, 1.0], [1.0, 1.0]]
    pg._compare(clear, {1: {"eager": ours}}, {"static": {1: [[2.0, 2.02], [1.98, 2.0], [2.0, 2.0]]}})
    assert "(2.0x [" in clear.record.metric(M.CONCLUSION.name).value
    assert "the lab's faster" in clear.record.metric(M.CONCLUSION.name).value
    noisy = [[1.3, 1.31], [0.8, 0.81], [1.05, 1.06]]  # a median 5% above ours, rounds that move by 50%
    pg._compare(close, {1: {"eager": ours}}, {"static": {1: noisy}})
    assert close.record.metric(M.SPEEDUP_VS_PEER.name, method="eager").value > 1.0
    assert "neither faster: the interval holds 1" in close.record.metric(M.CONCLUSION.name).value
    assert pg.faster(None) == "no interval: fewer than two rounds"
    assert pg.faster(intervals.Interval(0.5, 0.9)) == "transformers' faster"
    assert "interval" in pg.RULE


@pytest.mark.slow
def test_a_run_stores_every_speedup_vs_peer_with_its_interval(tmp_path: Path) -> None:
    """Through the runner (lab methods measured by the shared measurement, which hands back its rounds)."""
    from lab.run import runner

    res = runner.run(profiles.get("smoke"), tmp_path, only=["peer_generate"],
                     set_text={"peer_generate": {"variants": "dynamic", "isolated": "", "batches": "2",
                                                 "lab_methods": "eager", "rounds": "2", "new_tokens": "6",
                                                 "traces": "false"}})
    rec = res.record("peer_generate")
    assert rec.status == "OK", rec.reason
    speedups = [m for m in rec.metrics if m.name == M.SPEEDUP_VS_PEER.name]
    assert [m.params for m in speedups] == [{"impl": "lab", "method": "eager", "batch": 2, "peer": "dynamic"}]
    low, high = (rec.metric(n, **speedups[0].params).value for n in M.SPEEDUP_VS_PEER.interval)
    assert low is not None and high is not None and low <= high
