"""Overhead experiments: pure pieces on fake data, the RMS repair's arithmetic, replay validation, selection."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from types import SimpleNamespace

import pytest
import torch

from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.experiments import amdahl, fusion, graph_break_repair, selection
from lab.measure.opprofile import is_matmul, summarise
from lab.step.replay import check_like
from lab.contract.results import Metric, Reason, Record, Skipped, Spread
from lab.run.context import Context


def test_matmul_names() -> None:
    for name in ("aten::mm", "aten::addmm", "aten::bmm", "sm90_xmma_gemm_f32f32", "nvjet_tst_128x64", "ampere_sgemm_64x32"):
        assert is_matmul(name), name
    for name in ("aten::add", "aten::layer_norm", "triton_poi_fused_add_0", "cpp_fused_add_mul_0", "aten::addcmul"):
        assert not is_matmul(name), name


def _evt(name, us, parent=None, cpu=True):
    from torch.autograd import DeviceType

    return SimpleNamespace(name=name, cpu_parent=parent, device_type=DeviceType.CPU if cpu else DeviceType.CUDA,
                           self_cpu_time_total=us, cpu_time_total=us,
                           time_range=SimpleNamespace(elapsed_us=lambda: us))


def test_summarise_counts_outermost_ops_on_cpu() -> None:
    lin = _evt("aten::linear", 100.0)
    events = [lin, _evt("aten::addmm", 90.0, parent=lin), _evt("aten::gelu", 50.0), _evt("aten::add", 50.0),
              _evt("Torch-Compiled Region: 0/0", 10.0)]
    p = summarise(events, steps=2, device="cpu")
    assert p.kernels == 1.5  # linear, gelu, add over two steps; addmm nested, the region a wrapper
    assert p.matmul_share == pytest.approx(0.5)
    assert p.fusible_fraction == pytest.approx(0.5)


def test_summarise_counts_device_kernels_on_cuda() -> None:
    events = [_evt("aten::mm", 30.0), _evt("nvjet_gemm", 60.0, cpu=False), _evt("triton_poi_fused", 20.0, cpu=False)]
    p = summarise(events, steps=1, device="cuda")
    assert p.kernels == 2 and p.self_device_ms == pytest.approx(0.08)
    assert p.matmul_share == pytest.approx(0.75)


def test_replay_validation_rejects_before_copy() -> None:
    static = [torch.zeros(1, 256)]
    check_like([torch.ones(1, 256)], static)
    for bad, what in ((torch.ones(2, 256), "shape"), (torch.ones(1, 256, dtype=torch.float16), "dtype")):
        with pytest.raises(ValueError, match=what):
            check_like([bad], static)
    with pytest.raises(ValueError, match="expected 1"):
        check_like([], static)
    meta = torch.ones(1, 256, device="meta")
    with pytest.raises(ValueError, match="device"):
        check_like([meta], static)


@pytest.mark.parametrize("label,h,above", graph_break_repair.validation_inputs(2, 16, torch.device("cpu")))
def test_rms_repair_equal_on_validation_inputs(label, h, above) -> None:
    state = torch.full_like(h, 0.25)
    with redirect_stdout(io.StringIO()):
        ref = graph_break_repair.step_with_breaks(h, state)
    got = graph_break_repair.step_repaired(h, state)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    if label == "above":
        assert got[1][0, 0].item() == pytest.approx(0.325) and got[1][0, 1].item() == pytest.approx(0.225)
    if label == "zero":
        assert torch.isfinite(got[0]).all() and torch.allclose(got[1], torch.full_like(h, 0.225))


def test_fusion_arithmetic() -> None:
    assert fusion.bytes_moved(3, 100, fused=False) == 600 and fusion.bytes_moved(3, 100, fused=True) == 200
    x = torch.rand(10)
    y = fusion.make_chain(4)(x)
    torch.testing.assert_close(y, ((x * 1.0001 + 0.001) * 0.9999) - 0.0005)


def test_amdahl_prediction_and_k_source() -> None:
    assert amdahl.predicted_speedup(0.4, 3.0) == pytest.approx(1 / (0.6 + 0.4 / 3))
    assert amdahl.predicted_speedup(0.0, 5.0) == 1.0
    with pytest.raises(ValueError):
        amdahl.predicted_speedup(1.5, 2.0)
    rec = Record(id="fusion", title="", status="OK",
                 metrics=[Metric("speedup", 2.5, "x", {"n_ops": 4, "residency": "memory"})])
    assert amdahl.k_from_fusion([rec], 4, "memory")[0] == 2.5
    k, source = amdahl.k_from_fusion([], 4, "memory")
    assert k == 3.0 and source.startswith("assumed")


def _timing(method: str, median: float, iqr: float = 0.01, **params) -> Metric:
    sp = Spread(n=5, median=median, q1=median - iqr, q3=median + iqr, min=median - iqr, max=median + iqr,
                rel_iqr=2 * iqr / median, noisy=False)
    return Metric("step_ms", median, "ms", {"method": method, **params}, sp)


def test_selection_picks_winner_tie_and_not_measured() -> None:
    decode = Record(id="cuda_graph_decode", title="", status="OK", metrics=[
        _timing("eager", 3.2, batch=1, dtype="float32", readback=False),
        _timing("graph", 0.85, batch=1, dtype="float32", readback=False),
        _timing("compile-default", 3.6, batch=1, dtype="float32", readback=False),
        _timing("compile+graph", 0.645, batch=1, dtype="float32", readback=False),
        _timing("eager", 3.3, batch=1, dtype="float32", readback=True)])
    gemm = Record(id="gemm_bound", title="", status="OK",
                  metrics=[_timing("eager", 10.0, 0.5), _timing("compile-default", 9.9, 0.5)])
    launch = Record(id="launch_overhead", title="", status="OK",
                    metrics=[_timing("eager", 1.0), _timing("compile-default", 0.2)],
                    skipped=[Skipped("graph and compile+graph", "no_cuda", "needs CUDA")])
    recipe = Record(id="manual_graph_recipe", title="", status="NOT_RUN", reason=Reason("no_cuda", "no GPU"))
    results = SimpleNamespace(experiments=[decode, gemm, launch, recipe])
    rec = Record(id="selection", title="", status="OK")
    ctx = Context(BY_ID["selection"], profiles.get("smoke"), None, rec, results, None)  # checks every metric recorded
    selection.run(ctx)
    case = "batch=1, dtype=float32, readback=False"
    assert rec.metric("winner", workload="cuda_graph_decode", case=case).value == "compile+graph"
    assert rec.metric("speedup_vs_eager", workload="cuda_graph_decode", case=case).value == pytest.approx(3.2 / 0.645)
    assert rec.metric("winner", workload="gemm_bound").value == "eager"  # 1% faster, inside the spread: a tie
    assert rec.metric("tie_with_eager", workload="gemm_bound").value is True
    assert rec.metric("winner_family", workload="launch_overhead").value == "compile"
    assert "no_cuda" in rec.notes["evidence.launch_overhead.-"]
    skipped = {s.item: s.code for s in rec.skipped}
    assert skipped["manual_graph_recipe"] == "no_cuda" and skipped["fusion"] == "not_measured"
    assert not any(m.params.get("case", "").endswith("readback=True") for m in rec.metrics)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_static_graph_replays_like_eager() -> None:
    from lab.step.replay import StaticGraph

    model = torch.nn.Linear(256, 256).cuda().eval()
    x = torch.randn(1, 256, device="cuda")
    g = StaticGraph(model, (x,))
    y = torch.randn(1, 256, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(g(y), model(y))
    with pytest.raises(ValueError):
        g(y.cpu())
