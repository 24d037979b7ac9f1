"""lab.host.cpuplace: CPU lists, NUMA nodes and the GPU's node from a fake /sys, the thread's CPU from a stat
line, and LAB_CPU_BIND's sets (refused with one line naming the variable when unusable)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.host import cpuplace
from lab.host.cpuplace import BindError, bind_set, parse_cpulist


def test_cpu_lists_parse_as_linux_writes_them() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("5") == (5,)
    for bad in ("3-1", "a", "1-b", "1-70000", "70000"):  # issue 30, B1: 1-999999999999 built a list until OOM
        with pytest.raises(ValueError):
            parse_cpulist(bad)


def test_an_unusable_cpu_set_is_named_in_a_short_line() -> None:
    """Issue 30, B1: LAB_CPU_BIND=2-3000000 printed a 26 MB line listing every CPU."""
    with pytest.raises(BindError) as caught:
        bind_set("2-3000000", {}, None, (0, 1))
    assert len(str(caught.value)) < 200 and "CPU numbers up to 65535" in str(caught.value)
    with pytest.raises(BindError) as caught:
        bind_set("2-60000,9", {}, None, (0, 1, 60001, 60002))
    assert str(caught.value) == "LAB_CPU_BIND='2-60000,9': none of CPUs 2-60000 is allowed to this process " \
                                "(allowed: 0-1,60001-60002)"


def _fake_sys(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pci = tmp_path / "node", tmp_path / "pci"
    for n, cpus in ((0, "0-7"), (1, "8-15")):
        (nodes / f"node{n}").mkdir(parents=True)
        (nodes / f"node{n}" / "cpulist").write_text(cpus + "\n")
    for addr, vendor, cls, node in (("0000:00:02.0", "0x8086", "0x030000", "-1"),
                                    ("0000:c1:00.0", "0x10de", "0x030200", "1")):
        (pci / addr).mkdir(parents=True)
        (pci / addr / "vendor").write_text(vendor)
        (pci / addr / "class").write_text(cls)
        (pci / addr / "numa_node").write_text(node)
    return nodes, pci


def test_the_gpus_numa_node_comes_from_sysfs(tmp_path: Path) -> None:
    nodes, pci = _fake_sys(tmp_path)
    assert cpuplace.numa_nodes(nodes) == {0: tuple(range(8)), 1: tuple(range(8, 16))}
    assert cpuplace.first_nvidia_gpu(pci) == "0000:c1:00.0"  # the Intel display controller is not it
    assert cpuplace.gpu_node("0000:c1:00.0", pci) == 1
    assert cpuplace.gpu_node("0000:00:02.0", pci) == 0  # a single-node host writes -1
    assert cpuplace.gpu_node("0000:ff:00.0", pci) is None and cpuplace.gpu_node(None, pci) is None
    props = type("P", (), {"pci_domain_id": 0, "pci_bus_id": 0xC1, "pci_device_id": 0})()
    assert cpuplace.pci_address(props) == "0000:c1:00.0"
    assert cpuplace.pci_address(object()) is None  # a torch without the ids
    p = cpuplace.placement(pci_root=pci, node_root=nodes)
    assert p.gpu_node == 1 and p.as_dict()["numa_nodes"] == {"0": list(range(8)), "1": list(range(8, 16))}


def test_the_threads_cpu_is_field_39_even_with_spaces_in_the_name(tmp_path: Path) -> None:
    fields = ["S"] + [str(i) for i in range(4, 39)] + ["13"] + ["0"] * 13  # field 39 (processor) is 13
    stat = tmp_path / "stat"
    stat.write_text("4242 (a (weird) name) " + " ".join(fields))
    assert cpuplace.thread_cpu(stat) == 13
    stat.write_text("garbage")
    assert cpuplace.thread_cpu(stat) is None
    assert cpuplace.thread_cpu(tmp_path / "absent") is None


@pytest.mark.skipif(not Path("/proc/thread-self/stat").exists(), reason="no /proc/thread-self (not Linux)")
def test_the_threads_cpu_is_one_it_may_run_on() -> None:
    assert cpuplace.thread_cpu() in os.sched_getaffinity(0)


def test_bind_sets_follow_the_gpus_node_and_stay_within_the_allowed_cpus() -> None:
    nodes = {0: tuple(range(8)), 1: tuple(range(8, 16))}
    everything = tuple(range(16))
    assert bind_set("none", nodes, 1, everything) is None and bind_set("", nodes, 1, everything) is None
    assert bind_set("node", nodes, 1, everything) == tuple(range(8, 16))
    assert bind_set("node", nodes, None, everything) == tuple(range(8))  # no GPU: node 0
    assert bind_set("2-4,9", nodes, 1, (2, 3, 9)) == (2, 3, 9)  # only what the process may use
    with pytest.raises(BindError, match="LAB_CPU_BIND='20-21': none of CPUs"):
        bind_set("20-21", nodes, 1, everything)
    with pytest.raises(BindError, match="LAB_CPU_BIND='fast'"):
        bind_set("fast", nodes, 1, everything)
    with pytest.raises(BindError, match="no NUMA nodes"):
        bind_set("node", {}, None, everything)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity on this platform")
def test_binding_from_the_environment_applies_to_this_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    monkeypatch.setenv(cpuplace.BIND_ENV, str(one))
    try:
        assert cpuplace.bind_from_env() == (one,)
        assert os.sched_getaffinity(0) == {one}
        assert cpuplace.placement().bind == str(one)
    finally:
        os.sched_setaffinity(0, before)
    monkeypatch.setenv(cpuplace.BIND_ENV, "none")
    assert cpuplace.bind_from_env() is None and os.sched_getaffinity(0) == before


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no sched_getaffinity on this platform")
def test_lab_run_refuses_an_unusable_binding_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", "toolchain",
                          "--out", str(out)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, cpuplace.BIND_ENV: "9999"}, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: LAB_CPU_BIND='9999': none of CPUs 9999 is allowed to this process "
        f"(allowed: {cpuplace.cpulist_text(tuple(os.sched_getaffinity(0)))})"]
    assert not out.exists()
