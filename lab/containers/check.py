"""What a built image really is and does, asked of the image itself (`python -m lab image-check VARIANT`).

- its packages (`pip freeze --all` in the image) against its lock: any difference is drift;
- no apt binary caches (/var/cache/apt/*.bin) and the security suite in its apt sources;
- a bare `docker run IMAGE` prints the lab's help (exit 0), never a traceback;
- a run into a mounted folder it may not write ends with one line naming the folder and the fix (exit 2);
- it runs as a non-root user; its Python and key libraries beside its reference run;
- no lab image is left dangling (untagged) on the engine.
The raw answers are kept beside the verdicts, so a test can recompute them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from lab.containers import engine
from lab.containers.lock import freeze_drift, installed_in_image, read_from_image
from lab.containers.reference import describe
from lab.containers.variants import IMAGE_LABEL, REPO_ROOT, Variant
from lab.contract.names import Experiment


def _run(args: list[str], timeout: float = 300) -> dict[str, Any]:
    out = engine.call(args, timeout=timeout)
    if out is None:
        return {"exit": None, "stdout": "", "stderr": "did not finish"}
    return {"exit": out.returncode, "stdout": out.stdout[-6000:], "stderr": out.stderr[-6000:]}


def in_image(tag: str, *shell: str) -> dict[str, Any]:
    return _run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", tag, "-c", " ".join(shell)])


def python_version(tag: str) -> str:
    out = in_image(tag, "python3 -c 'import platform; print(platform.python_version())'")
    return out["stdout"].strip() or "unknown"


def image_environment(variant: Variant) -> dict[str, Any] | None:
    """The image's Python and packages against its reference run (resolve: the packages it resolved)."""
    try:
        packages = read_from_image(variant.tag, "/opt/lab/resolved.txt") if variant.target == "resolve" \
            else installed_in_image(variant.tag)
    except RuntimeError:
        return None
    return describe(variant.family, python_version(variant.tag), packages)


def unwritable_out_run(tag: str) -> dict[str, Any]:
    """The lab run into a mounted folder owned by someone else (root here, mode 755)."""
    with tempfile.TemporaryDirectory(prefix="lab-out-") as tmp:
        folder = Path(tmp) / "out"
        folder.mkdir(mode=0o755)
        out = _run(["docker", "run", "--rm", "--network", "none", "-v", f"{folder}:/out", tag, "run", "--profile",
                    "smoke", "--only", Experiment.TOOLCHAIN, "--out", "/out"])
        out["folder_owner_uid"] = folder.stat().st_uid
    return out


def check_image(variant: Variant) -> dict[str, Any]:
    tag = variant.tag
    facts: dict[str, Any] = {"variant": variant.name, "image": tag, "image_id": engine.image_id(tag)}
    if facts["image_id"] is None:
        facts["problems"] = [f"{tag} is not built here: python -m lab images {variant.name}"]
        return facts
    problems: list[str] = []
    if variant.lock:
        freeze = installed_in_image(tag)
        drift = freeze_drift(freeze, (REPO_ROOT / variant.lock).read_text(), frozenset(variant.removes))
        facts.update(freeze=freeze, lock=variant.lock, drift=drift.describe())
        if drift:
            problems.append(f"packages drifted from {variant.lock}: {drift.describe()}")
    caches = in_image(tag, "find /var/cache/apt /var/lib/apt/lists -name '*.bin' -o -name '*_Packages*' | sort")
    facts["apt_caches"] = caches["stdout"].split()
    if facts["apt_caches"]:
        problems.append(f"apt caches left in the image: {', '.join(facts['apt_caches'])}")
    sources = in_image(tag, "cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null")
    facts["apt_sources"] = sources["stdout"]
    if "-security" not in sources["stdout"]:
        problems.append("the apt sources have no security suite")
    facts["user"] = in_image(tag, "id -u")["stdout"].strip()
    if facts["user"] in ("", "0"):
        problems.append(f"runs as uid {facts['user'] or '?'}: expected the non-root lab user")
    facts["bare_run"] = _run(["docker", "run", "--rm", "--network", "none", tag], timeout=120)
    if facts["bare_run"]["exit"] != 0 or "usage: python -m lab" not in facts["bare_run"]["stdout"]:
        problems.append(f"a bare `docker run {tag}` did not print the lab's help (exit {facts['bare_run']['exit']})")
    if os.getuid() != 1000:  # a folder this host user owns is writable in the container only when it is uid 1000
        facts["unwritable_out"] = run = unwritable_out_run(tag)
        lines = run["stderr"].strip().splitlines()
        if run["exit"] != 2 or len(lines) != 1 or "permission denied" not in run["stderr"]:
            problems.append(f"a run into an unwritable /out did not end with one line and exit 2 (exit {run['exit']})")
    facts["environment"] = image_environment(variant)
    dangling = _run(["docker", "images", "--quiet", "--filter", "dangling=true", "--filter", f"label={IMAGE_LABEL}"])
    facts["dangling_lab_images"] = dangling["stdout"].split()
    if facts["dangling_lab_images"]:
        problems.append(f"untagged lab images left: {', '.join(facts['dangling_lab_images'])}")
    facts["problems"] = problems
    return facts
