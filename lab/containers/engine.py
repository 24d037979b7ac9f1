"""Asking the Docker engine: is it there and answering, which OS it runs, can it pass GPUs, image ids."""

from __future__ import annotations

import shutil
import subprocess
from typing import Sequence

from lab.contract.reasons import Code, Reason


def call(cmd: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str] | None:
    """Run a command capturing its output; None when it cannot be started or times out."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def _answer(cmd: Sequence[str], timeout: float = 30) -> str | None:
    out = call(cmd, timeout)
    return out.stdout.strip() if out is not None and out.returncode == 0 and out.stdout.strip() else None


def engine_reason() -> Reason | None:
    """Why no Docker engine can be used from here, or None when `docker info` answers."""
    if shutil.which("docker") is None:
        return Reason(Code.NO_DOCKER, "the docker CLI is not on PATH: install Docker (Debian: apt-get install "
                                      "docker.io) and start dockerd")
    out = call(["docker", "info", "--format", "{{json .}}"], timeout=30)
    if out is None or out.returncode != 0:
        detail = (out.stderr.strip().splitlines() or [""])[0] if out is not None else "docker info timed out"
        return Reason(Code.DOCKER_DAEMON_UNREACHABLE, f"the Docker engine does not answer ({detail}): start dockerd "
                                                      "(or the Docker service) and check you may use its socket")
    return None


def engine_os() -> str | None:
    """The OS the engine runs containers of ("linux", "windows"), None when it does not answer."""
    return _answer(["docker", "info", "--format", "{{.OSType}}"])


def gpu_reason() -> Reason | None:
    """Why the host's GPUs cannot be passed to a container, or None (engine with the nvidia runtime/CDI)."""
    runtimes = _answer(["docker", "info", "--format", "{{json .Runtimes}}"]) or ""
    if "nvidia" not in runtimes and shutil.which("nvidia-container-cli") is None and shutil.which("nvidia-ctk") is None:
        return Reason(Code.NO_NVIDIA_CONTAINER_TOOLKIT, "the Docker engine has no NVIDIA runtime: install the NVIDIA "
                                                        "Container Toolkit (nvidia-ctk runtime configure) to pass GPUs "
                                                        "with --gpus all")
    return None


def image_id(tag: str) -> str | None:
    """The id (sha256:...) of a local image, None when there is no such image."""
    return _answer(["docker", "image", "inspect", "--format", "{{.Id}}", tag])


def image_size_mb(tag: str) -> float | None:
    size = _answer(["docker", "image", "inspect", "--format", "{{.Size}}", tag])
    try:
        return round(int(size) / 1e6, 1) if size else None
    except ValueError:
        return None
