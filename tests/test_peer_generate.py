"""lab/experiments/peer_generate.py: transformers' generate variants on the lab's weights; a crashed child keeps its finished batches."""

from __future__ import annotations

from pathlib import Path

import torch

from lab.contract import catalogue, profiles
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
    assert out["error"] is None and len(out["ms_per_token"]) == 2 * 5 and len(out["steady_calls_s"]) == 2
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
