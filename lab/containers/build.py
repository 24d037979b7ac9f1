"""`docker build` of the image variants: each ends OK, NOT_RUN (with why) or FAILED, recorded in a report."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from lab import __version__
from lab.atomic import write_json_atomic
from lab.containers import engine
from lab.containers.context import lab_commit, stage_context
from lab.containers.pipconf import PipSettings, host_pip_settings
from lab.containers.variants import BASE_TAG, CONTEXT_DIR, REPORT_PATH, VARIANTS, Variant
from lab.reasons import Reason


@dataclass
class ImageOutcome:
    """One variant's build, in the lab's own terms: OK, NOT_RUN with a reason, or FAILED."""

    variant: str
    status: str
    image: str
    image_id: str | None = None
    reason: dict[str, str] | None = None
    duration_s: float = 0.0
    size_MB: float | None = None


def build_args(variant: Variant, pip: PipSettings, commit: str, base_image: str | None,
               extra: dict[str, str] | None = None) -> dict[str, str]:
    args = {"LAB_COMMIT": commit, "LAB_VERSION": __version__, "LAB_IMAGE": variant.tag, **pip.build_args()}
    if base_image:
        args["BASE_IMAGE"] = base_image
    args.update(extra or {})
    return args


def build_command(variant: Variant, context: Path, args: dict[str, str], network_host: bool = True) -> list[str]:
    """`docker build` for one variant. The legacy builder is used on purpose: it needs no buildx plugin."""
    cmd = ["docker", "build", "--target", variant.target, "-t", variant.tag, "-f", str(context / variant.dockerfile)]
    if network_host:
        cmd += ["--network", "host"]  # apt and pip inside the build use the host's network and proxy
    for key, value in sorted(args.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    return cmd + [str(context)]


def unbuildable_reason(variant: Variant, host_engine_os: str | None) -> Reason | None:
    if variant.os == "windows" and host_engine_os != "windows":
        return Reason("windows_host_required",
                      f"{variant.name} needs a Windows container host (this engine runs {host_engine_os or 'no OS'}"
                      " containers): build it on Windows Server or Docker Desktop in Windows-containers mode with "
                      "`docker build -f docker/Dockerfile.windows .` (docs/containers.md)")
    if variant.os == "linux" and host_engine_os not in (None, "linux"):
        return Reason("linux_host_required", f"{variant.name} needs a Linux container host")
    return None


def build_images(names: Sequence[str], base_image: str | None = None, pip: PipSettings | None = None,
                 extra_args: dict[str, str] | None = None, report: Path = REPORT_PATH,
                 log: Callable[[str], object] = print) -> list[ImageOutcome]:
    """Build the variants asked for; every one ends OK, NOT_RUN (with why) or FAILED, written to `report`."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown image variant(s): {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    outcomes: list[ImageOutcome] = []
    reason = engine.engine_reason()
    host_os = engine.engine_os() if reason is None else None
    pip = pip or host_pip_settings()
    staged = False
    commit = lab_commit()
    if base_image is None and reason is None and engine.image_id(BASE_TAG):
        base_image = BASE_TAG  # made by `python -m lab base-image`: the way to build without a registry
    for name in names:
        variant = VARIANTS[name]
        why = reason or unbuildable_reason(variant, host_os)
        if why is not None:
            outcomes.append(ImageOutcome(name, "NOT_RUN", variant.tag, reason=asdict(why)))
            log(f"{name}: NOT_RUN ({why.code}: {why.message})")
            continue
        if not staged:
            info = stage_context(CONTEXT_DIR, pip)
            log(f"build context {CONTEXT_DIR}: {info['files']} files, wheels {info['wheels'] or 'none'}, "
                f"CA bundle {'yes' if info['cert'] else 'no'}" + "".join(f"; ignored {i}" for i in pip.ignored))
            staged = True
        cmd = build_command(variant, CONTEXT_DIR, build_args(variant, pip, commit, base_image, extra_args))
        log("$ " + " ".join(cmd))
        start = time.perf_counter()
        proc = subprocess.run(cmd, env={**os.environ, "DOCKER_BUILDKIT": "0"})
        took = round(time.perf_counter() - start, 1)
        if proc.returncode != 0:
            outcomes.append(ImageOutcome(name, "FAILED", variant.tag, duration_s=took, reason=asdict(Reason(
                "build_failed", f"docker build exited with {proc.returncode}: see the build log above"))))
            log(f"{name}: FAILED after {took} s")
            continue
        outcomes.append(ImageOutcome(name, "OK", variant.tag, engine.image_id(variant.tag), duration_s=took,
                                     size_MB=engine.image_size_mb(variant.tag)))
        log(f"{name}: OK {variant.tag} in {took} s")
    write_json_atomic(report, {"commit": commit, "base_image": base_image or "(Dockerfile default)",
                               "images": [asdict(o) for o in outcomes]})
    return outcomes
