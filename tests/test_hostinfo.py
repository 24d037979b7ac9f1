"""lab/host/hostinfo.py: the host's facts (real hostname, load, CPU flags and caches)."""

from __future__ import annotations

from pathlib import Path

from lab.host import hostinfo
from lab.run.manifest import finish


def test_host_facts(tmp_path: Path, monkeypatch) -> None:
    for i, (level, kind, size) in enumerate(((1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"))):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert hostinfo.cpu_caches(tmp_path) == {"L1d": "48K", "L1i": "32K", "L2": "2048K"}
    assert hostinfo.cpu_caches(tmp_path / "absent") is None
    assert hostinfo.cpu_flags("processor : 0\nflags\t\t: fpu avx2 avx512f amx_bf16\n") == ["fpu", "avx2", "avx512f",
                                                                                          "amx_bf16"]
    assert hostinfo.cpu_flags("Features\t: fp asimd sve\n") == ["fp", "asimd", "sve"]
    assert hostinfo.cache_state(tmp_path / "none") == {"state": "cold", "entries": 0}
    assert hostinfo.cache_state(tmp_path) == {"state": "warm", "entries": 9}
    monkeypatch.setenv("LAB_HOSTNAME", "h200-rack-3")
    assert hostinfo.host_info()["real_hostname"] == "h200-rack-3"
    load_avg = hostinfo.load_average()
    assert load_avg is None or (len(load_avg) == 3 and all(x >= 0 for x in load_avg))
    manifest: dict = {"host": {"hostname": "vm"}}
    finish(manifest)
    assert len(manifest["host"]["load_end"]) == 3  # Linux has load averages


def test_nvidia_smi_names_each_card_by_its_uuid_and_bus_id(monkeypatch) -> None:
    """Machines of one kind may hold different cards: the manifest records which card a run had (uuid, pci.bus_id),
    one object per GPU, every field asked of nvidia-smi in the order asked."""
    asked: list[list[str]] = []
    line = ("NVIDIA H200, 580.159.04, 143771 MiB, 1980 MHz, 3201 MHz, 345 MHz, 3201 MHz, 700.00 W, 700.00 W, 5, 9.0, "
            "Enabled, GPU-5d0c2a1e-0000-4a11-9c3e-2b7f00000001, 00000000:1A:00.0")

    def run_text(cmd: list[str]) -> str:
        asked.append(cmd)
        return line + "\n" + line.replace("0001", "0002").replace(":1A:", ":2B:")

    monkeypatch.setattr(hostinfo, "run_text", run_text)
    got = hostinfo.nvidia_smi()
    assert got is not None and len(got["gpus"]) == 2
    assert asked[0][1] == "--query-gpu=" + ",".join(hostinfo.NVIDIA_SMI_FIELDS)
    assert got["gpus"][0]["uuid"] == "GPU-5d0c2a1e-0000-4a11-9c3e-2b7f00000001"
    assert got["gpus"][1]["pci.bus_id"] == "00000000:2B:00.0" and got["gpus"][1]["name"] == "NVIDIA H200"
    assert list(got["gpus"][0]) == list(hostinfo.NVIDIA_SMI_FIELDS)
