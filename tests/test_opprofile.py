"""lab/measure/opprofile.py: matmul names, and the summary of outermost ops on the CPU and device kernels on CUDA."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab.measure.opprofile import is_matmul, summarise


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
