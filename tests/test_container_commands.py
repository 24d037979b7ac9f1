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

REPO = Path(__file__).resolve().parent.parent
BLOCKED = ("torch", "pydantic", "numpy", "jinja2", "rich", "transformers", "matplotlib")
CONTAINER_COMMANDS = ("images", "base-image", "image-run", "inductor-probe")


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


@pytest.mark.slow
def test_images_records_an_unbuildable_variant_without_torch(bare_env, tmp_path):
    report = tmp_path / "images.json"
    out = lab(bare_env, "images", "windows-msvc", "--no-host-pip", "--report", str(report))
    assert out.returncode == 0, out.stderr
    assert "windows-msvc NOT_RUN" in out.stdout and report.is_file()


def test_image_run_require_container_is_a_one_line_error_without_torch(bare_env, tmp_path):
    out = lab(bare_env, "image-run", "--variant", "windows-msvc", "--require-container", "--out", str(tmp_path / "r"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [out.stderr.strip()]
    assert out.stderr.startswith("error: windows_host_required:")


def test_image_run_needs_a_profile_or_a_variant(bare_env):
    out = lab(bare_env, "image-run")
    assert out.returncode == 2 and out.stderr.strip() == "error: give --profile (smoke, cpu, gpu) or --variant"
