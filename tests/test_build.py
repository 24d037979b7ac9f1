"""lab/containers/build.py: build commands, what cannot be built and why, the build report (against a fake engine)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from lab.containers import build, engine, run
from lab.containers.pipconf import PipSettings
from lab.containers.variants import VARIANTS


def test_build_command_uses_target_tag_and_args(tmp_path):
    v = VARIANTS["cpu-nocc"]
    args = build.build_args(v, PipSettings(index_url="https://i.example/simple"), "abc123", "graph-lab-base:bookworm")
    cmd = build.build_command(v, tmp_path, args)
    assert cmd[:7] == ["docker", "build", "--target", "cpu-nocc", "-t", "graph-lab:cpu-nocc", "-f"]
    assert cmd[-1] == str(tmp_path) and "--network" in cmd
    for item in ("LAB_COMMIT=abc123", "BASE_IMAGE=graph-lab-base:bookworm", "LAB_IMAGE=graph-lab:cpu-nocc",
                 "PIP_INDEX_URL=https://i.example/simple"):
        assert item in cmd


def test_windows_variant_is_not_run_on_a_linux_engine():
    reason = build.unbuildable_reason(VARIANTS["windows-msvc"], "linux")
    assert reason is not None and reason.code == "windows_host_required"
    assert "Dockerfile.windows" in reason.message
    assert build.unbuildable_reason(VARIANTS["cpu"], "linux") is None


def test_without_docker_images_are_not_run_and_the_lab_falls_back(monkeypatch, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(engine.shutil, "which", lambda name: None if name == "docker" else real_which(name))
    outcomes = build.build_images(["cpu", "windows-msvc"], pip=PipSettings(), report=tmp_path / "r.json",
                                      log=lambda *_: None)
    assert [(o.status, o.reason["code"]) for o in outcomes] == [("NOT_RUN", "no_docker"), ("NOT_RUN", "no_docker")]
    assert (tmp_path / "r.json").is_file()
    variant, reason = run.container_plan("cpu")
    assert variant is None and reason.code == "no_docker" and "apt-get install docker.io" in reason.message


def test_unknown_variant_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="unknown image variant.*cpu-nope"):
        build.build_images(["cpu-nope"], pip=PipSettings(), report=tmp_path / "r.json")


FAKE_DOCKER = """#!/bin/sh
# A Docker engine that answers, runs Linux containers, has no images and reaches no registry.
case "$1" in
  info) if [ "$3" = "{{.OSType}}" ]; then echo linux; else echo '{}'; fi; exit 0;;
  image) exit 1;;
  pull) echo 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host' >&2; exit 1;;
esac
echo "fake docker: unexpected $*" >&2; exit 3
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_a_base_image_that_cannot_be_pulled_points_at_the_local_base(fake_docker, tmp_path):
    report = tmp_path / "images.json"
    (o,) = build.build_images(["cpu"], pip=PipSettings(), report=report, log=lambda *_: None)
    assert o.status == "NOT_RUN" and o.reason["code"] == "base_image_unavailable"
    assert "debian:12.11-slim" in o.reason["message"] and "no such host" in o.reason["message"]
    assert "python -m lab base-image" in o.reason["message"] and "nox -s base_image" in o.reason["message"]
    (o,) = build.build_images(["cpu-nocc"], base_image="mine:1", pip=PipSettings(), report=report, log=lambda *_: None)
    assert o.reason["code"] == "base_image_unavailable" and "mine:1" in o.reason["message"]


def test_the_build_report_is_merged_not_overwritten(tmp_path):
    report = tmp_path / "images.json"
    build.merge_report(report, "c1", [build.ImageOutcome("cuda", "OK", "graph-lab:cuda", "sha256:a")])
    build.merge_report(report, "c2", [build.ImageOutcome("cpu", "OK", "graph-lab:cpu", "sha256:b")])
    data = json.loads(report.read_text())
    assert [i["variant"] for i in data["images"]] == ["cpu", "cuda"] and data["commit"] == "c2"
    build.merge_report(report, "c3", [build.ImageOutcome("cpu", "FAILED", "graph-lab:cpu")])
    assert {i["variant"]: i["status"] for i in json.loads(report.read_text())["images"]} == {"cpu": "FAILED", "cuda": "OK"}


def test_the_windows_sentence_gives_the_whole_build_command():
    reason = build.unbuildable_reason(VARIANTS["windows-msvc"], "linux")
    for part in ("python -m lab images windows-msvc", "--target windows-msvc", "-t graph-lab:windows-msvc",
                 "-f build/docker-context/docker/Dockerfile.windows", " build/docker-context`"):
        assert part in reason.message, part
