"""The fleet on a real Slurm cluster: a two-task job array (the smoke profile on the host and in graph-lab:cpu).

CI starts a single-node cluster (.ci/slurm.sh: munged, slurmctld, slurmd from Debian's packages) and
builds graph-lab:cpu (.ci/docker.sh) first, then sets LAB_SLURM=1: there a missing cluster or image
fails this test. Elsewhere it skips with the reason. It runs exactly what docs/fleet.md shows:

    python -m lab fleet --results DIR --profile smoke --variant host --variant cpu --only ONLY --cpus 1 --wait

ONLY keeps the smoke profile's quick experiments (half a minute per run on 2 cores; compile_cost alone
takes minutes), which between them give the comparison dozens of shared metrics.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ONLY = "toolchain,graph_breaks,recompiles,ceilings,launch_overhead,allocation"


def require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("LAB_SLURM") == "1":
        pytest.fail(f"LAB_SLURM=1 but {why} (.ci/run runs .ci/slurm.sh and .ci/docker.sh first)")
    pytest.skip(why)


def slurm_node() -> str | None:
    if shutil.which("sinfo") is None:
        return None
    out = subprocess.run(["sinfo", "-h", "-o", "%n %t"], capture_output=True, text=True, timeout=30)
    up = [line.split()[0] for line in out.stdout.splitlines() if line.split()[1:2] and
          line.split()[1].rstrip("*~#") in ("idle", "mix", "alloc")]
    return up[0] if out.returncode == 0 and up else None


def image_built(tag: str) -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[Path, str, subprocess.CompletedProcess[str]]:
    node = slurm_node()
    require(node is not None, "no Slurm cluster answers here (sinfo shows no node up)")
    require(image_built("graph-lab:cpu"), "graph-lab:cpu is not built (python -m lab images cpu)")
    results = tmp_path_factory.mktemp("fleet") / "results"
    out = subprocess.run([sys.executable, "-m", "lab", "fleet", "--results", str(results), "--profile", "smoke",
                          "--variant", "host", "--variant", "cpu", "--only", ONLY, "--cpus", "1", "--time", "20", "--wait",
                          "--timeout", "1200"], cwd=REPO, capture_output=True, text=True, timeout=1500)
    return results, node, out


def test_the_array_ran_and_both_runs_landed(fleet):
    results, node, out = fleet
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 of 2 runs landed" in out.stdout
    summary = json.loads((results / "fleet-report.json").read_text())
    assert [t["status"] for t in summary["targets"]] == ["landed", "landed"], summary
    for name in ("smoke-host", "smoke-cpu"):
        res = json.loads((results / "runs" / f"{node}--{name}" / "results.json").read_text())
        assert res["run"]["state"] == "complete" and res["run"]["profile"] == "smoke"
        assert [e["id"] for e in res["experiments"]] == ONLY.split(",")
        assert not [e["id"] for e in res["experiments"] if e["status"] == "FAILED"]


def test_each_manifest_names_the_node_and_the_slurm_job_ids(fleet):
    results, node, _ = fleet
    plan = json.loads((results / "fleet.json").read_text())
    (job,) = plan["jobs"]
    assert job["indices"] == [0, 1]
    for index, name in enumerate(("smoke-host", "smoke-cpu")):
        manifest = json.loads((results / "runs" / f"{node}--{name}" / "manifest.json").read_text())
        s = manifest["scheduler"]
        assert s["kind"] == "slurm" and s["node"] == node
        assert s["array_job_id"] == job["job_id"] and s["array_task_id"] == str(index) and s["job_id"]
        assert s["fleet"]["target"] == name
        assert manifest["host"]["hostname"] == node
        status = json.loads((results / "tasks" / f"{index}.json").read_text())
        assert status["exit_code"] == 0 and status["scheduler"]["job_id"] == s["job_id"]
    host = json.loads((results / "runs" / f"{node}--smoke-host" / "manifest.json").read_text())["container"]
    image = json.loads((results / "runs" / f"{node}--smoke-cpu" / "manifest.json").read_text())["container"]
    assert image["in_container"] is True and image["image"] == "graph-lab:cpu" and image["variant"] == "cpu"
    assert host["image"] is None and host["fallback_reason"] is None


def test_one_report_compares_the_two_runs(fleet):
    results, node, _ = fleet
    index = (results / "report" / "index.html").read_text()
    assert f"{node}--smoke-host" in index and f"{node}--smoke-cpu" in index
    compare = (results / "report" / "compare.html").read_text()
    assert f"{node}--smoke-host" in compare and f"{node}--smoke-cpu" in compare
    assert "Why it moved" in compare and 'title="container.image"' in compare
    why = compare.split("Why it moved", 1)[1].split("</table>", 1)[0]
    assert 'class="differs"><td title="container.image"' in why, "the image/host difference is not shown as a reason"
    assert "Every metric both runs have" in compare and "No metric is in both runs" not in compare
    assert list((results / "slurm").glob("*_0.out")) and list((results / "slurm").glob("report-*.out"))
