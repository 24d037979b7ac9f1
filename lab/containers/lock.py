"""The images' lock files: every installed package pinned with its sha256, and the check that an image matches.

docker/lock-<family>.txt is made by the Dockerfile's `lock` stage, which resolves the unpinned
requirements (torch, pip, setuptools and pyproject's dependencies) with the image's own Python and
the host's index settings and writes pip's resolution report; this module turns that report into
`name==version --hash=sha256:...` lines. The `deps` stage installs the lock with --require-hashes,
so pip refuses a package that is not in it or whose file differs. `freeze_drift` compares an
image's `pip freeze --all` with its lock: any difference is drift.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

from lab.containers import engine
from lab.containers.context import stage_context
from lab.containers.pipconf import PipSettings
from lab.containers.variants import BASE_TAG, CONTEXT_DIR, REPO_ROOT, STAGE_REPO
from lab.host.wheelhouse import normalize, sha256

# Installed in an image but not from the lock: the lab itself (from the build context, --no-deps).
NOT_LOCKED = frozenset({"graph-lab"})
# What each family's lock is resolved from (Dockerfile.lock's build arguments). cuda: transformers at
# the H200 reference run's version, so that the image differs from that environment only where it must
# (Python: Debian 12 has 3.11; the reference ran 3.12). cpu: the CPU build of torch.
LOCK_INPUTS: dict[str, dict[str, str]] = {
    "cpu": {"TORCH_SPEC": "torch==2.13.0+cpu", "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
            "EXTRA_SPECS": ""},
    "cuda": {"TORCH_SPEC": "torch==2.11.0", "TORCH_INDEX_URL": "",
             "EXTRA_SPECS": "triton==3.6.0 transformers==5.17.0"},
}


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...] = ()


def parse_lock(text: str) -> dict[str, Pin]:
    """`name==version --hash=sha256:X` entries (backslash continuations allowed) by normalised name."""
    pins: dict[str, Pin] = {}
    for entry in re.sub(r"\\\s*\n", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)\s*$", entry)
        if not m:
            raise ValueError(f"lock entry {entry[:80]!r}: expected NAME==VERSION --hash=sha256:HEX")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3)))
        pins[normalize(m.group(1))] = Pin(m.group(1), m.group(2), hashes)
    return pins


def parse_freeze(text: str) -> dict[str, str]:
    """`pip freeze --all` lines (name==version; `name @ url` for direct installs) -> {normalised name: version}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            name, _, version = line.partition(" @ ")
            version = "@ " + version
        out[normalize(name)] = version
    return out


@dataclass
class Drift:
    """How an image's installed packages differ from its lock (empty: no drift)."""

    missing: list[str] = field(default_factory=list)  # locked, not installed
    extra: list[str] = field(default_factory=list)  # installed, not locked
    changed: list[str] = field(default_factory=list)  # installed at another version

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.changed)

    def describe(self) -> str:
        parts = [f"{label}: {', '.join(items)}" for label, items in
                 (("missing", self.missing), ("not in the lock", self.extra), ("other version", self.changed)) if items]
        return "; ".join(parts) or "none"


def freeze_drift(freeze_text: str, lock_text: str, removed: frozenset[str] = frozenset()) -> Drift:
    """Compare `pip freeze --all` with the lock; `removed` are locked packages the variant uninstalls."""
    installed = {k: v for k, v in parse_freeze(freeze_text).items() if k not in NOT_LOCKED}
    locked = {k: p.version for k, p in parse_lock(lock_text).items() if k not in removed}
    return Drift(missing=sorted(f"{k}=={v}" for k, v in locked.items() if k not in installed),
                 extra=sorted(f"{k}=={v}" for k, v in installed.items() if k not in locked),
                 changed=sorted(f"{k} {installed[k]} (lock {v})" for k, v in locked.items()
                                if k in installed and installed[k] != v))


def lock_from_report(report: dict[str, Any], local_file: Callable[[str], Path | None], header: str) -> str:
    """pip's `--report` JSON -> the lock's text. A file from the build's wheelhouse (file:// URL without
    a hash in the report) is hashed from the host's copy that `local_file` finds by file name."""
    lines = [header.rstrip("\n")]
    for item in sorted(report.get("install", []), key=lambda i: normalize(i["metadata"]["name"])):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        info = item.get("download_info", {})
        hashes = dict(info.get("archive_info", {}).get("hashes") or {})
        legacy = info.get("archive_info", {}).get("hash", "")
        if not hashes and legacy.startswith("sha256="):
            hashes["sha256"] = legacy.split("=", 1)[1]
        if "sha256" not in hashes:
            url = info.get("url", "")
            host_copy = local_file(unquote(url.rsplit("/", 1)[-1])) if url.startswith("file:") else None
            if host_copy is None:
                raise ValueError(f"{name}=={version}: pip reported no sha256 for {url or 'its file'} "
                                 "and no host copy was found to hash")
            hashes["sha256"] = sha256(host_copy)
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{hashes['sha256']}")
    return "\n".join(lines) + "\n"


def lock_header(family: str, python: str) -> str:
    inputs = " ".join(v for k, v in LOCK_INPUTS.get(family, {}).items() if k != "TORCH_INDEX_URL" and v)
    return (f"# The {family} images' packages, every one pinned with its sha256 (installed with --require-hashes).\n"
            f"# Made by `python -m lab image-lock {family}` (docker/Dockerfile.lock) on {date.today()} with {python}\n"
            f"# from: {inputs} pip setuptools + pyproject.toml's dependencies. Do not edit by hand: remake it.\n")


def read_from_image(tag: str, path: str) -> str:
    """A file's text from an image (a throwaway container that only cats it)."""
    out = engine.call(["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", tag, path], timeout=120)
    if out is None or out.returncode != 0:
        detail = (out.stderr.strip().splitlines() or [""])[-1] if out is not None else "timed out"
        raise RuntimeError(f"{tag}: cannot read {path} ({detail})")
    return out.stdout


def python_of(tag: str) -> str:
    out = engine.call(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "--version"])
    return out.stdout.strip() if out is not None and out.returncode == 0 else "python unknown"


def write_lock(family: str, tag: str, wheelhouses: list[str]) -> Path:
    """Turn the lock stage image's report into docker/lock-<family>.txt; the path written."""
    report = json.loads(read_from_image(tag, "/opt/lab/lock-report.json"))

    def local_file(name: str) -> Path | None:
        return next((p for p in (Path(h) / name for h in wheelhouses) if p.is_file()), None)

    path = REPO_ROOT / "docker" / f"lock-{family}.txt"
    path.write_text(lock_from_report(report, local_file, lock_header(family, python_of(tag))))
    return path


def installed_in_image(tag: str) -> str:
    """`pip freeze --all` of the image's venv, run in the image (what is really there, not a build log)."""
    out = engine.call(["docker", "run", "--rm", "--network", "none", "--entrypoint", "pip", tag, "freeze", "--all"],
                      timeout=120)
    if out is None or out.returncode != 0:
        raise RuntimeError(f"{tag}: pip freeze failed ({(out.stderr.strip() if out else 'timed out')[:200]})")
    return out.stdout


def make_lock(family: str, pip: PipSettings, base_image: str | None = None,
              extra_args: dict[str, str] | None = None, log: Callable[[str], object] = print) -> Path:
    """Resolve the family's inputs in Dockerfile.lock and write docker/lock-<family>.txt."""
    if family not in LOCK_INPUTS:
        raise ValueError(f"unknown lock family {family!r} (choose from {', '.join(LOCK_INPUTS)})")
    why = engine.engine_reason()
    if why is not None:
        raise RuntimeError(f"{why.code}: {why.message}")
    if base_image is None and engine.image_id(BASE_TAG):
        base_image = BASE_TAG
    info = stage_context(CONTEXT_DIR, pip)
    log(f"build context {CONTEXT_DIR}: {info['files']} files, wheels {info['wheels'] or 'none'}")
    args = {**LOCK_INPUTS[family], **pip.build_args(), **({"BASE_IMAGE": base_image} if base_image else {}),
            **(extra_args or {})}
    tag = f"{STAGE_REPO}:{family}-lock"
    cmd = ["docker", "build", "--target", "lock", "-t", tag, "-f", str(CONTEXT_DIR / "docker" / "Dockerfile.lock"),
           "--network", "host", *[a for k, v in sorted(args.items()) for a in ("--build-arg", f"{k}={v}")],
           str(CONTEXT_DIR)]
    log("$ " + " ".join(cmd))
    if subprocess.run(cmd, env={**os.environ, "DOCKER_BUILDKIT": "0"}).returncode != 0:
        raise RuntimeError(f"the lock build for {family} failed: see the build log above")
    path = write_lock(family, tag, pip.wheelhouses)
    log(f"{path}: {len(parse_lock(path.read_text()))} packages pinned with their sha256")
    return path
