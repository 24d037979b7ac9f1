"""The image variants: which Dockerfile and stage each is, where it can be built, and what it is for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
IMAGE_REPO = "graph-lab"
STAGE_REPO = "graph-lab-stage"  # named build stages (deps, lock): Docker's cache, visible and removable
IMAGE_LABEL = "lab.image=graph-lab"  # every stage of the lab's Dockerfiles carries it
BASE_TAG = "graph-lab-base:bookworm"
CONTEXT_DIR = REPO_ROOT / "build" / "docker-context"
REPORT_PATH = REPO_ROOT / "build" / "images.json"
IMAGE_UID = 1000  # the non-root user `lab` of the Linux images (Dockerfile ARG LAB_UID)


@dataclass(frozen=True)
class Variant:
    """One image: which Dockerfile and stage, where it can be built, and what it is for."""

    name: str
    dockerfile: str  # relative to the repo root
    target: str
    os: str  # "linux" or "windows": the container host OS the image needs
    gpu: bool  # run with the host's GPUs passed through (--gpus all)
    profile: str  # the lab profile the image runs by default
    description: str
    family: str = "cpu"  # images of one Dockerfile share its lock (docker/lock-<family>.txt) and deps stage
    cuda: str | None = None  # the CUDA version its torch is built for: the host driver must support it
    removes: tuple[str, ...] = ()  # locked packages this variant uninstalls

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}:{self.name}"

    @property
    def lock(self) -> str | None:
        """The lock file its packages come from (None for the Windows image: see docs/containers.md)."""
        return f"docker/lock-{self.family}.txt" if self.os == "linux" else None

    def stage_tag(self, stage: str) -> str:
        """The name a build stage of this variant's Dockerfile is tagged with (kept as cache, never dangling)."""
        return f"{STAGE_REPO}:{self.family}-{stage}"


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("cpu", "docker/Dockerfile.cpu", "cpu", "linux", False, "cpu",
            "torch 2.13.0 CPU with g++ and python3-dev: Inductor's C++ backend works"),
    Variant("cpu-nocc", "docker/Dockerfile.cpu", "cpu-nocc", "linux", False, "cpu",
            "torch 2.13.0 CPU without any C++ compiler: Inductor-on-CPU items are NOT_RUN: no_cxx_compiler"),
    Variant("cuda", "docker/Dockerfile.cuda", "cuda", "linux", True, "gpu",
            "torch 2.11.0 (CUDA 13.0 wheels) with Triton 3.6: needs the host driver >= 580.65.06 and the NVIDIA "
            "Container Toolkit", family="cuda", cuda="13.0"),
    Variant("cuda-notriton", "docker/Dockerfile.cuda", "cuda-notriton", "linux", True, "gpu",
            "the cuda image with Triton removed: Inductor-on-GPU items are NOT_RUN: no_triton", family="cuda",
            cuda="13.0", removes=("triton",)),
    # The cuda Dockerfile up to its torch install, as a metadata-only resolution of the same pins:
    # what a host without a GPU and without the multi-GB CUDA wheels can check.
    Variant("cuda-resolve", "docker/Dockerfile.cuda", "resolve", "linux", False, "gpu",
            "the cuda image's lock resolved from index metadata (pip --dry-run --require-hashes): no image to run",
            family="cuda"),
    Variant("windows-msvc", "docker/Dockerfile.windows", "windows-msvc", "windows", False, "cpu",
            "Windows Server Core with Python 3.11, torch CPU and the MSVC Build Tools (Windows container hosts only)",
            family="windows"),
)}
# The variant a profile runs in (cpu_lab, gpu_lab).
PROFILE_VARIANT = {"cpu": "cpu", "smoke": "cpu", "gpu": "cuda"}


def get(name: str) -> Variant:
    """The variant called `name`; an unknown name is a one-line error listing the known ones."""
    if name not in VARIANTS:
        raise ValueError(f"unknown image variant {name!r} (choose from {', '.join(VARIANTS)})")
    return VARIANTS[name]
