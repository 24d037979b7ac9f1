"""compile_cost's parts: cache provenance, a cache not reused under another setting, break-even from child results."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
import json

import pytest
import torch

from lab.host import cache_dir, compile_cache
from lab.experiments import compile_cost
from lab.run.manifest import collect
from lab.contract.results import Record
from lab.run.context import Context
from lab.host.toolchain import probe
from lab.contract import profiles
from lab.contract.catalogue import BY_ID


needs_cxx = pytest.mark.skipif(probe().cxx_reason() is not None, reason="no working C++ compiler for Inductor")


@needs_cxx
@pytest.mark.slow
def test_cache_is_not_reused_under_another_shape_or_dtype(tmp_path: Path, monkeypatch) -> None:
    from torch._dynamo.utils import counters

    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) + 1

    def compile_once(x: torch.Tensor, w: torch.Tensor) -> dict[str, int]:
        torch._dynamo.reset()
        counters.clear()
        torch.compile(f)(x, w)
        return compile_cache.cache_counters()

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    # config.patch, not monkeypatch.setattr: undoing a monkeypatch on torch's config module deletes the
    # option (it then reads "does not exist") and breaks every later compile in the process
    with inductor_config.patch(fx_graph_cache=True):
        assert compile_once(x, w)["fxgraph_cache_miss"] == 1  # populates the cache
        assert compile_once(x, w)["fxgraph_cache_hit"] == 1  # same setting: reused
        other_shape = compile_once(torch.randn(5, 8), w)
        assert other_shape["fxgraph_cache_hit"] == 0 and other_shape["fxgraph_cache_miss"] == 1
        other_dtype = compile_once(x.double(), w.double())
        assert other_dtype["fxgraph_cache_hit"] == 0 and other_dtype["fxgraph_cache_miss"] == 1
    torch._dynamo.reset()


def test_provenance_in_manifest_and_record() -> None:
    tc = probe()
    field = collect(toolchain=tc)["compile_cache"]
    valid = field["valid_for"]
    # the manifest describes the device a run here compiles for: CUDA where the probe saw a GPU (the H200), else the CPU
    expected_device = "cuda" if tc.cuda.available else "cpu"
    assert valid["torch"] == torch.__version__ and valid["cxx"] == tc.cxx.compiler
    assert valid["device"]["type"] == expected_device
    assert "input shapes, strides, dtypes and devices" in field["key_contains"]
    prov = compile_cache.provenance("decode_core", {"x": [1, 1, 64]}, "float32", "cpu", tc, cache_dir="/c")
    assert prov["shapes"] == {"x": [1, 1, 64]} and prov["dtype"] == "float32" and prov["cache_dir"] == "/c"
    env = cache_dir.isolated_env("/tmp/abc")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/abc" and env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"


@torch.no_grad()
def test_repeated_core_calls_are_the_same_work() -> None:
    """The child times the core without advancing the state: repeated calls must change nothing."""
    model = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128, seed=0)
    fn, args, shapes = compile_cost._build("decode_core", model, 2, "cpu", "float32", 1, 32, 8)
    first = fn(*args).clone()
    caches = [c.clone() for c in args[3]]
    second = fn(*args)
    assert torch.equal(first, second) and all(torch.equal(a, b) for a, b in zip(caches, args[3]))
    assert shapes["caches"] == [[2, 1, 4, 32, 16]] * 2
    mlp, mlp_args, mlp_shapes = compile_cost._build("mlp", model, 0, "cpu", "float64", 3, 32, 8)
    assert mlp(*mlp_args).dtype == torch.float64 and mlp_shapes == {"x": [3, 256]}


def test_break_even_from_child_results() -> None:
    from lab.contract import profiles
    from lab.contract.catalogue import BY_ID

    record = Record(id="compile_cost", title="t", status="OK")
    ctx = Context(BY_ID["compile_cost"], profiles.get("smoke"), probe(), record, SimpleNamespace(), None)
    # as a child's JSON brings them back: method names as plain strings
    cold = {"first_call_s": 10.0, "steady": {"eager": [3.0, 3.0, 3.0], "compile-default": [2.0, 2.0, 2.0]}}
    warm = {"first_call_s": 2.0, "steady": {"eager": [3.0, 3.1, 2.9], "compile-default": [2.5, 2.5, 2.5]}}
    never = {"first_call_s": 2.0, "steady": {"eager": [1.0], "compile-default": [2.0]}}
    compile_cost._record_steady(ctx, "decode_core", cold, warm)
    got = {(m.name, m.params.get("phase"), m.params.get("method")): m.value for m in record.metrics}
    assert got[("break_even_calls", "cold", None)] == 10_000  # 10 s / 1 ms
    assert got[("break_even_calls", "warm", None)] == 4_000  # 2 s / 0.5 ms
    assert got[("steady_ms", None, "compile-default")] == 2.5  # from the warm process
    compile_cost._record_steady(ctx, "mlp", never, never)
    assert any(m.name == "break_even_calls" and m.value is None for m in record.metrics)
    assert "never_pays.mlp.cold" in record.notes


def _ctx(experiment: str, record: Record, results: object = None) -> Context:
    return Context(BY_ID[experiment], profiles.get("smoke"), None, record, results or SimpleNamespace(experiments=[]),
                   None)


def test_compile_cost_records_each_first_call_once(monkeypatch) -> None:
    def child(first: float) -> dict:
        return {"first_call_s": first, "counters": {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 1},
                "shapes": {"x": [1]}, "steady": {"eager": [2.0], "compile-default": [1.0]}, "threads": 1,
                "fx_graph_cache": True}

    monkeypatch.setattr(compile_cost, "_cold_warm", lambda ctx, root, target, n, tag: (child(10.0 + n), child(1.0 + n),
                                                                                        root))
    monkeypatch.setattr(compile_cost, "_child", lambda *a, **kw: child(5.0))
    monkeypatch.setattr(compile_cost, "provenance", lambda *a, **kw: {})
    record = Record("compile_cost", "c", "OK")
    ctx = _ctx("compile_cost", record)
    ctx.options = compile_cost.Options(depths=(1, 2), mlp_trials=0)
    compile_cost.run(ctx)
    keys = [json.dumps(m.params, sort_keys=True) for m in record.metrics if m.name == "first_call_s"]
    assert len(keys) == len(set(keys)) == 4  # cold and warm at depths 1 and 2 (2, the model's, recorded once)
