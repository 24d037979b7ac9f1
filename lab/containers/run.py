"""Running the lab in an image: the `docker run` command, the choice of image, or why the host instead.

The run has no network (the lab downloads nothing; this proves it). The output folder is mounted at
/out; a local checkpoint given with --weights is mounted read-only at /weights.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Callable, Mapping, Sequence

from lab.containers import engine
from lab.containers.variants import IMAGE_UID, PROFILE_VARIANT, VARIANTS, Variant
from lab.host.driver import driver_cuda_version, driver_reason, driver_version
from lab.host.scheduler import FORWARDED
from lab.contract.reasons import Code, Reason


def run_command(variant: Variant, lab_args: Sequence[str], out_dir: Path, weights: str | None = None,
                image_ref: str | None = None, host_uid: int | None = None, host_gid: int | None = None,
                environ: Mapping[str, str] | None = None) -> list[str]:
    """`docker run` of `python -m lab <lab_args> [--weights /weights] --out /out` in the variant's image.

    A non-root host user runs the container under its own uid so that the results belong to it;
    root runs as the image's `lab` user (prepare_out_dir makes out_dir writable for it).
    """
    uid = os.getuid() if host_uid is None else host_uid
    gid = os.getgid() if host_gid is None else host_gid
    env = os.environ if environ is None else environ
    args = list(lab_args)
    # --hostname: the manifest names the host the container ran on, not the container's id.
    cmd = ["docker", "run", "--rm", "--network", "none", "--shm-size", "1g",
           "--hostname", socket.gethostname().split(".")[0],
           "-v", f"{out_dir.resolve()}:/out", "-e", f"LAB_IMAGE_ID={image_ref or engine.image_id(variant.tag) or ''}"]
    for name in FORWARDED:  # a fleet task's scheduler ids, for the manifest
        if env.get(name):
            cmd += ["-e", f"{name}={env[name]}"]
    if weights and weights != "random" and Path(weights).exists():
        cmd += ["-v", f"{Path(weights).resolve()}:/weights:ro"]
        args += ["--weights", "/weights"]
    elif weights:
        args += ["--weights", weights]
    if uid != 0:
        cmd += ["--user", f"{uid}:{gid}", "-e", "HOME=/tmp", "-e", "USER=lab"]
    if variant.gpu:
        cmd += ["--gpus", "all"]
    return cmd + [variant.tag, *args, "--out", "/out"]


def container_plan(profile: str, variant_name: str | None = None) -> tuple[Variant | None, Reason | None]:
    """The variant to run `profile` in, or why the lab must run on the host instead. A GPU image is run
    with --gpus all, so it needs the NVIDIA Container Toolkit whatever the profile."""
    if variant_name is not None and variant_name not in VARIANTS:
        raise ValueError(f"--variant {variant_name}: unknown (choose from {', '.join(VARIANTS)})")
    variant = VARIANTS[variant_name or PROFILE_VARIANT.get(profile, "cpu")]
    if variant.os != "linux":
        return None, Reason(Code.WINDOWS_HOST_REQUIRED, f"{variant.tag} runs on Windows container hosts only")
    reason = engine.engine_reason()
    if reason is None and engine.engine_os() not in ("linux", None):
        reason = Reason(Code.LINUX_HOST_REQUIRED, f"the Docker engine runs {engine.engine_os()} containers; "
                                                  f"{variant.tag} is a Linux image")
    if reason is None and engine.image_id(variant.tag) is None:
        reason = Reason(Code.IMAGE_MISSING, f"{variant.tag} is not built here: build it with "
                                            f"`python -m lab images {variant.name}` to run the lab in its container")
    if reason is None and variant.gpu:
        reason = engine.gpu_reason()
    return (variant if reason is None else None), reason


def host_driver_reason(variant: Variant) -> Reason | None:
    """driver_too_old when this host's NVIDIA driver cannot run the variant's CUDA (None: fine, or no driver)."""
    if variant.cuda is None:
        return None
    return driver_reason(variant.cuda, driver_version(), driver_cuda_version(), f"{variant.tag} (torch built for "
                         f"CUDA {variant.cuda})")


def prepare_out_dir(out_dir: Path) -> None:
    """Create out_dir; as root, hand it to the image's non-root user so the container can write it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if os.getuid() == 0:
        os.chown(out_dir, IMAGE_UID, IMAGE_UID)


def run_lab(variant: Variant, lab_args: Sequence[str], out_dir: Path, weights: str | None = None,
            log: Callable[[str], object] = print) -> int:
    """Run the lab in the variant's image with out_dir mounted at /out; the container's exit status."""
    prepare_out_dir(out_dir)
    cmd = run_command(variant, lab_args, out_dir, weights)
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd).returncode
