"""`docker build` of the image variants: each ends OK, NOT_RUN (with why) or FAILED, merged into a report.

The legacy builder (no buildx plugin needed) keeps every stage as an image. So that nothing is left
untagged, each family's `deps` stage is built first under its own name (graph-lab-stage:cpu-deps:
the expensive layer cache, visible and removable), the variant's target reuses it from the cache, and
lab images left dangling by a rebuild (the label lab.image=graph-lab) are pruned afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from lab import __version__
from lab.atomic import write_json_atomic
from lab.containers import engine
from lab.containers.check import image_environment
from lab.containers.context import lab_commit, stage_context
from lab.containers.pipconf import PipSettings, host_pip_settings
from lab.containers.reference import sentence
from lab.containers.variants import BASE_TAG, CONTEXT_DIR, IMAGE_LABEL, REPO_ROOT, REPORT_PATH, VARIANTS, Variant
from lab.contract.reasons import Code, Reason

Log = Callable[[str], object]


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
    commit: str | None = None
    base_image: str | None = None
    environment: dict[str, object] | None = None  # Python and key libraries against the reference run


def build_args(variant: Variant, pip: PipSettings, commit: str, base_image: str | None,
               extra: dict[str, str] | None = None) -> dict[str, str]:
    args = {"LAB_COMMIT": commit, "LAB_VERSION": __version__, "LAB_IMAGE": variant.tag, **pip.build_args()}
    if base_image:
        args["BASE_IMAGE"] = base_image
    args.update(extra or {})
    return args


def build_command(variant: Variant, context: Path, args: dict[str, str], network_host: bool = True,
                  target: str | None = None, tag: str | None = None) -> list[str]:
    """`docker build` of one variant (or of one of its stages, with `target` and `tag`)."""
    cmd = ["docker", "build", "--target", target or variant.target, "-t", tag or variant.tag,
           "-f", str(context / variant.dockerfile)]
    if network_host:
        cmd += ["--network", "host"]  # apt and pip inside the build use the host's network and proxy
    for key, value in sorted(args.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    return cmd + [str(context)]


def windows_build_sentence(variant: Variant) -> str:
    """The commands that build the Windows image on a Windows container host (staged context and target)."""
    by_hand = " ".join(build_command(variant, Path("build/docker-context"), {}, network_host=False))
    return (f"on a Windows container host (Windows Server, or Docker Desktop in Windows-containers mode) run "
            f"`python -m lab images {variant.name}`, which stages build/docker-context and runs `{by_hand}`")


def unbuildable_reason(variant: Variant, host_engine_os: str | None) -> Reason | None:
    if variant.os == "windows" and host_engine_os != "windows":
        return Reason(Code.WINDOWS_HOST_REQUIRED, f"{variant.name} needs a Windows container host (this engine runs "
                                                  f"{host_engine_os or 'no OS'} containers): "
                                                  f"{windows_build_sentence(variant)} (docs/containers.md)")
    if variant.os == "linux" and host_engine_os not in (None, "linux"):
        return Reason(Code.LINUX_HOST_REQUIRED, f"{variant.name} needs a Linux container host")
    return None


def dockerfile_base(variant: Variant, repo: Path = REPO_ROOT) -> str:
    """The Dockerfile's default BASE_IMAGE."""
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", (repo / variant.dockerfile).read_text(), flags=re.M)
    if not m:
        raise ValueError(f"{variant.dockerfile}: no `ARG BASE_IMAGE=` default")
    return m.group(1)


def base_reason(base: str, log: Log = print) -> Reason | None:
    """None when the base image is here or can be pulled; else why, pointing at the local base image."""
    if engine.image_id(base):
        return None
    log(f"$ docker pull {base}")
    out = engine.call(["docker", "pull", base], timeout=600)
    if out is not None and out.returncode == 0:
        return None
    detail = (out.stderr.strip().splitlines() or ["no answer"])[-1] if out is not None else "docker pull timed out"
    return Reason(Code.BASE_IMAGE_UNAVAILABLE,
                  f"the base image {base} is not on this host and cannot be pulled ({detail[:200]}): make a local "
                  f"Debian base from the host's apt mirror with `python -m lab base-image` (or `nox -s base_image`, "
                  f"as root; the builds then use {BASE_TAG}), or pass --base-image REF naming one you have")


def prune_dangling(log: Log = print) -> None:
    """Remove the lab's images that a rebuild left without a name (superseded stages and variants)."""
    out = engine.call(["docker", "image", "prune", "--force", "--filter", f"label={IMAGE_LABEL}"], timeout=300)
    if out is not None and out.returncode == 0 and out.stdout.strip():
        log(out.stdout.strip().splitlines()[-1])


def merge_report(report: Path, commit: str, outcomes: list[ImageOutcome]) -> dict[str, object]:
    """This build's outcomes merged into the report: other variants' earlier entries are kept."""
    try:
        old = json.loads(report.read_text())
        entries = {i["variant"]: i for i in old.get("images", []) if isinstance(i, dict) and "variant" in i}
    except (OSError, ValueError, AttributeError):
        entries = {}
    entries |= {o.variant: asdict(o) for o in outcomes}
    order = [v for v in VARIANTS if v in entries] + sorted(set(entries) - set(VARIANTS))
    data: dict[str, object] = {"commit": commit, "images": [entries[v] for v in order]}
    write_json_atomic(report, data)
    return data


def docker_build(cmd: list[str], log: Log) -> tuple[int, float]:
    log("$ " + " ".join(cmd))
    start = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return proc.returncode, round(time.perf_counter() - start, 1)


def build_images(names: Sequence[str], base_image: str | None = None, pip: PipSettings | None = None,
                 extra_args: dict[str, str] | None = None, report: Path = REPORT_PATH, drop_stages: bool = False,
                 log: Log = print) -> list[ImageOutcome]:
    """Build the variants asked for; every one ends OK, NOT_RUN (with why) or FAILED, merged into `report`."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown image variant(s): {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    outcomes: list[ImageOutcome] = []
    reason = engine.engine_reason()
    host_os = engine.engine_os() if reason is None else None
    pip = pip or host_pip_settings()
    staged, bases_checked = False, {}
    stages_built: dict[str, str] = {}  # family -> its deps stage's tag
    commit = lab_commit()
    if base_image is None and reason is None and engine.image_id(BASE_TAG):
        base_image = BASE_TAG  # made by `python -m lab base-image`: the way to build without a registry
    for name in names:
        variant = VARIANTS[name]
        why = reason or unbuildable_reason(variant, host_os)
        base = base_image or dockerfile_base(variant)
        if why is None:
            if base not in bases_checked:
                bases_checked[base] = base_reason(base, log)
            why = bases_checked[base]
        if why is not None:
            outcomes.append(ImageOutcome(name, "NOT_RUN", variant.tag, reason=asdict(why), commit=commit,
                                         base_image=base))
            log(f"{name}: NOT_RUN ({why.code}: {why.message})")
            continue
        if not staged:
            info = stage_context(CONTEXT_DIR, pip)
            log(f"build context {CONTEXT_DIR}: {info['files']} files, wheels {info['wheels'] or 'none'}, "
                f"CA bundle {'yes' if info['cert'] else 'no'}" + "".join(f"; ignored {i}" for i in pip.ignored))
            staged = True
        args = build_args(variant, pip, commit, base_image, extra_args)
        took = 0.0
        code = 0
        if variant.target != "resolve" and variant.family not in stages_built:
            code, took = docker_build(build_command(variant, CONTEXT_DIR, args, target="deps",
                                                    tag=variant.stage_tag("deps")), log)
            stages_built[variant.family] = variant.stage_tag("deps")
        if code == 0:
            code, took2 = docker_build(build_command(variant, CONTEXT_DIR, args), log)
            took = round(took + took2, 1)
        if code != 0:
            outcomes.append(ImageOutcome(name, "FAILED", variant.tag, duration_s=took, commit=commit, base_image=base,
                                         reason=asdict(Reason(Code.BUILD_FAILED, f"docker build exited with {code}: "
                                                                                 "see the build log above"))))
            log(f"{name}: FAILED after {took} s")
            continue
        env = image_environment(variant)
        outcomes.append(ImageOutcome(name, "OK", variant.tag, engine.image_id(variant.tag), duration_s=took,
                                     size_MB=engine.image_size_mb(variant.tag), commit=commit, base_image=base,
                                     environment=env))
        log(f"{name}: OK {variant.tag} in {took} s" + (f"; {sentence(variant.tag, env)}" if env else ""))
    if stages_built:
        if drop_stages:
            for tag in sorted(stages_built.values()):
                engine.call(["docker", "image", "rm", tag], timeout=300)
        prune_dangling(log)
    merge_report(report, commit, outcomes)
    return outcomes
