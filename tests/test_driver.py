"""The NVIDIA driver against the CUDA version a torch build or image needs (lab.host.driver), and the toolchain's use of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.containers.run import host_driver_reason
from lab.containers.variants import VARIANTS
from lab.host.driver import MIN_DRIVER, driver_reason, driver_version, min_driver, version_tuple
from lab.host.toolchain import CudaInfo, CxxInfo, Toolchain, TritonInfo


def test_version_tuple_and_the_minimum_driver_table():
    assert version_tuple("580.65.06") == (580, 65, 6) and version_tuple(None) == ()
    assert min_driver("13.0") == MIN_DRIVER[13] == "580.65.06"
    assert min_driver("12.8") == "525.60.13" and min_driver(None) is None and min_driver("99.0") is None


def test_an_old_driver_is_driver_too_old_naming_both_versions():
    reason = driver_reason("13.0", "535.104.05", "12.2", "torch's CUDA build (13.0)")
    assert reason is not None and reason.code == "driver_too_old"
    for part in ("CUDA 13.0", "driver >= 580.65.06", "535.104.05", "supports CUDA up to 12.2", "upgrade the driver"):
        assert part in reason.message


def test_the_driver_version_alone_decides_when_libcuda_cannot_be_asked():
    assert driver_reason("13.0", "570.86.15", None).code == "driver_too_old"
    assert driver_reason("13.0", "580.159.04", None) is None  # the H200 reference host's driver


def test_minor_version_compatibility_and_no_driver_are_not_too_old():
    assert driver_reason("12.8", "535.104.05", "12.2") is None  # a 12.x driver runs every 12.x build
    assert driver_reason("13.0", None, None) is None  # no driver at all: that is no_cuda, not this
    assert driver_reason(None, "535.104.05", "12.2") is None  # a CPU build of torch needs no driver


def test_driver_version_from_nvidia_smi_else_the_kernel_module(tmp_path: Path):
    assert driver_version(run=lambda: "580.159.04\n580.159.04\n") == "580.159.04"
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert driver_version(run=lambda: None, proc=proc) == "535.104.05"
    assert driver_version(run=lambda: None, proc=tmp_path / "absent") is None


def toolchain(**cuda) -> Toolchain:
    return Toolchain(platform="linux", cuda=CudaInfo(False, **cuda), triton=TritonInfo(False, why_not="x"),
                     cxx=CxxInfo(inductor_setting="g++", compiler=None, path=None, version=None))


def test_the_toolchain_says_driver_too_old_instead_of_no_cuda():
    tc = toolchain(torch_cuda="13.0", why_not="torch.cuda.is_available() is False", driver_version="535.104.05",
                   driver_cuda="12.2", min_driver="580.65.06")
    reason = tc.cuda_reason()
    assert reason.code == "driver_too_old" and "13.0" in reason.message and "535.104.05" in reason.message
    assert tc.reason_for("cuda", "cuda").code == "driver_too_old"
    assert toolchain(torch_cuda=None, why_not="torch was built without CUDA").cuda_reason().code == "no_cuda"


def test_the_toolchain_records_the_driver_fields():
    fields = Toolchain.as_dict(toolchain())["cuda"]
    assert {"driver_version", "driver_cuda", "min_driver", "torch_cuda"} <= set(fields)


def test_the_host_is_checked_against_the_cuda_image_before_it_runs(monkeypatch):
    import lab.containers.run as run

    monkeypatch.setattr(run, "driver_version", lambda: "550.54.15")
    monkeypatch.setattr(run, "driver_cuda_version", lambda: "12.4")
    reason = host_driver_reason(VARIANTS["cuda"])
    assert reason.code == "driver_too_old" and "graph-lab:cuda" in reason.message and "580.65.06" in reason.message
    assert host_driver_reason(VARIANTS["cpu"]) is None


@pytest.mark.cuda
def test_this_hosts_driver_runs_this_torch():
    """On a GPU host: the probe found the driver and judged it new enough (torch sees the device)."""
    from lab.host.toolchain import probe

    cuda = probe().cuda
    assert cuda.available and cuda.driver_version and cuda.min_driver
    assert version_tuple(cuda.driver_version) >= version_tuple(cuda.min_driver)
