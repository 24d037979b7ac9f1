"""lab/containers/run.py: the docker run command of a variant."""

from __future__ import annotations
import shutil

from lab.containers.run import run_command
from lab.containers.variants import VARIANTS
from lab.containers import engine, run


def test_a_container_run_sees_the_scheduler_ids_and_the_hosts_name(tmp_path):
    cmd = run_command(VARIANTS["cpu"], ["run"], tmp_path, image_ref="sha256:x", host_uid=0, host_gid=0,
                      environ={"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n2", "UNRELATED": "x"})
    assert "SLURM_JOB_ID=9" in cmd and "SLURMD_NODENAME=n2" in cmd and not any("UNRELATED" in c for c in cmd)
    assert cmd[cmd.index("--hostname") + 1]


def test_run_command_mounts_out_and_passes_image_id(tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    cmd = run.run_command(VARIANTS["cuda"], ["run", "--profile", "gpu"], tmp_path, weights=str(weights),
                          image_ref="sha256:feed", host_uid=1234, host_gid=99)
    assert cmd[:3] == ["docker", "run", "--rm"]
    assert f"{tmp_path.resolve()}:/out" in cmd and "LAB_IMAGE_ID=sha256:feed" in cmd
    assert ["--gpus", "all"] == cmd[cmd.index("--gpus"):cmd.index("--gpus") + 2]
    assert ["--user", "1234:99"] == cmd[cmd.index("--user"):cmd.index("--user") + 2]
    assert cmd[-2:] == ["--out", "/out"]
    assert f"{weights.resolve()}:/weights:ro" in cmd and cmd[cmd.index("--weights") + 1] == "/weights"
    root = run.run_command(VARIANTS["cpu"], ["run"], tmp_path, image_ref="sha256:x", host_uid=0, host_gid=0)
    assert "--user" not in root and "--gpus" not in root and root[root.index("--network") + 1] == "none"


def test_a_gpu_image_needs_the_container_toolkit_whatever_the_profile(monkeypatch):
    """`image-run --variant cuda --profile smoke` would pass --gpus all: without a toolkit Docker fails raw
    (exit 125), so the plan says no_nvidia_container_toolkit first."""
    monkeypatch.setattr(engine, "engine_reason", lambda: None)
    monkeypatch.setattr(engine, "engine_os", lambda: "linux")
    monkeypatch.setattr(engine, "image_id", lambda tag: "sha256:x")
    monkeypatch.setattr(engine, "_answer", lambda cmd, timeout=30: '{"runc":{}}')
    real_which = shutil.which
    monkeypatch.setattr(engine.shutil, "which", lambda name: None if name.startswith("nvidia") else real_which(name))
    for profile in ("smoke", "gpu"):
        variant, reason = run.container_plan(profile, "cuda")
        assert variant is None and reason.code == "no_nvidia_container_toolkit" and "nvidia-ctk" in reason.message
    variant, reason = run.container_plan("smoke", "cpu")
    assert variant is not None and reason is None
