"""The container commands run with the host's bare python: no torch, no pydantic, nothing but the standard library.

nox's Docker sessions and the fleet's Slurm tasks call `python3 -m lab images|base-image|image-run|fleet`
with whatever python3 the host has. A shim folder put first on PYTHONPATH makes `import torch` (and
pydantic, numpy, jinja2, rich) raise, so any import of them at startup or in these commands fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("torch", "pydantic", "numpy", "jinja2", "rich", "transformers", "matplotlib")
CONTAINER_COMMANDS = ("images", "base-image", "image-run", "image-check", "image-lock", "inductor-probe", "fleet",
                      "fleet-task", "fleet-report")


@pytest.fixture(scope="module")
def bare_env(tmp_path_factory) -> dict[str, str]:
    shim = tmp_path_factory.mktemp("no-heavy-imports")
    for name in BLOCKED:
        (shim / name).mkdir()
        (shim / name / "__init__.py").write_text(
            f"raise ImportError('{name} imported by a command that must run on the standard library only')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)])}


def lab(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_shim_really_blocks_torch(bare_env):
    out = subprocess.run([sys.executable, "-c", "import torch"], env=bare_env, capture_output=True, text=True)
    assert out.returncode != 0 and "must run on the standard library only" in out.stderr


def test_lab_help_lists_the_container_commands_without_torch(bare_env):
    out = lab(bare_env, "--help")
    assert out.returncode == 0, out.stderr
    for name in CONTAINER_COMMANDS:
        assert name in out.stdout


@pytest.mark.parametrize("command", CONTAINER_COMMANDS)
def test_container_command_help_needs_no_torch(bare_env, command):
    out = lab(bare_env, command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m lab {command}")


def test_images_records_an_unbuildable_variant_without_torch(bare_env, tmp_path):
    report = tmp_path / "images.json"
    out = lab(bare_env, "images", "windows-msvc", "--no-host-pip", "--report", str(report))
    assert out.returncode == 1, out.stderr  # its only job was not done: `nox -s images` must fail
    assert "windows-msvc NOT_RUN" in out.stdout and report.is_file()
    assert out.stderr.startswith("error: no image was built (windows-msvc: ")


def test_images_fails_when_nothing_was_built_and_not_for_a_variant_beside_a_built_one(capsys):
    from lab.commands.images import exit_status
    from lab.containers.build import ImageOutcome

    no_docker = ImageOutcome("cpu", "NOT_RUN", "graph-lab:cpu", reason={"code": "no_docker",
                                                                        "message": "docker is not on PATH: install it"})
    assert exit_status([no_docker]) == 1
    assert capsys.readouterr().err.strip() == "error: no image was built (cpu: no_docker): docker is not on PATH: install it"
    built = ImageOutcome("cpu", "OK", "graph-lab:cpu")
    windows = ImageOutcome("windows-msvc", "NOT_RUN", "graph-lab:windows-msvc", reason={"code": "windows_host_required",
                                                                                        "message": "needs Windows"})
    assert exit_status([built, windows]) == 0
    assert exit_status([built, ImageOutcome("cuda", "FAILED", "graph-lab:cuda")]) == 1


def test_image_run_require_container_is_a_one_line_error_without_torch(bare_env, tmp_path):
    out = lab(bare_env, "image-run", "--variant", "windows-msvc", "--require-container", "--out", str(tmp_path / "r"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith("error: windows_host_required:")


def test_image_run_passes_the_run_options_on():
    """What `nox -s gpu_lab -- --label NAME --resume --stop-after S ...` asks for reaches `lab run`, in a container or on the host."""
    import argparse

    from lab.commands import image_run

    parser = argparse.ArgumentParser()
    image_run.add_parser(parser.add_subparsers())
    args = parser.parse_args(["image-run", "--profile", "gpu", "--only", "ceilings", "--set", "a.b=1", "--label",
                              "h200", "--resume", "--stop-after", "240", "-v", "--strict"])
    assert image_run.run_args(args, "gpu") == ["run", "--profile", "gpu", "--only", "ceilings", "--set", "a.b=1",
                                               "--label", "h200", "--stop-after", "240", "--resume", "-v", "--strict"]
    plain = parser.parse_args(["image-run", "--profile", "cpu"])
    assert image_run.run_args(plain, "cpu") == ["run", "--profile", "cpu"]


def test_image_run_needs_a_profile_or_a_variant(bare_env):
    out = lab(bare_env, "image-run")
    assert out.returncode == 2 and out.stderr.strip() == "error: give --profile (smoke, cpu, gpu) or --variant"


def test_fleet_writes_a_kubernetes_manifest_and_a_dry_run_plan_without_torch(bare_env, tmp_path):
    out = lab(bare_env, "fleet", "--profile", "gpu", "--variant", "cuda", "--k8s", str(tmp_path / "fleet.yaml"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "fleet.yaml").read_text().startswith("---\n")
    out = lab(bare_env, "fleet", "--results", str(tmp_path / "r"), "--profile", "smoke", "--variant", "host",
              "--dry-run")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r" / "fleet.json").is_file() and (tmp_path / "r" / "slurm" / "array-0.sbatch").is_file()


def test_fleet_refuses_bad_targets_in_one_line(bare_env, tmp_path):
    out = lab(bare_env, "fleet", "--results", str(tmp_path), "--profile", "smoke", "--variant", "host", "--k8s",
              str(tmp_path / "x.yaml"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "need Slurm" in out.stderr
    out = lab(bare_env, "fleet", "--profile", "smoke", "--variant", "host")
    assert out.returncode == 2 and out.stderr.startswith("error: --results DIR")


@pytest.mark.slow
def test_a_folder_the_lab_may_not_write_is_one_line_naming_it_and_the_fix(tmp_path):
    """The root of `docker run IMAGE` into a root-owned /out: a PermissionError is one line, exit 2.
    (As root nothing is unwritable, so the lab's writer is made to refuse, as the kernel does for uid 1000.)"""
    script = (
        "import sys, lab.atomic as a\n"
        "def refuse(path, data):\n"
        "    raise PermissionError(13, 'Permission denied', str(path))\n"
        "import lab.run.runner as r; r.write_json_atomic = refuse\n"
        "from lab.__main__ import main\n"
        f"sys.exit(main(['run', '--profile', 'smoke', '--only', 'toolchain', '--out', {str(tmp_path / 'out')!r}]))\n")
    # a temporary folder of its own: the run's start sweeps the lab's folders that killed runs left in the system's
    # (one more line, "removed 1 temporary folder(s) ...", where a run on this host was killed before this test)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "LAB_IMAGE": "graph-lab:cpu", "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'out'}")
    assert "permission denied for uid" in lines[0] and "chown" in lines[0] and "--user" in lines[0]


def test_the_lab_help_in_an_image_says_how_to_run_it(bare_env):
    out = lab({**bare_env, "LAB_IMAGE": "graph-lab:cuda"}, "--help")
    assert out.returncode == 0
    assert "docker run --rm --gpus all" in out.stdout and "graph-lab:cuda run --profile gpu --out /out" in out.stdout
    assert "This is the image" not in lab(bare_env, "--help").stdout
