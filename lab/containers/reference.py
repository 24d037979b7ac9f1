"""An image's environment beside the reference run it is meant to reproduce: what differs, said out loud.

The cuda image is built to reproduce the H200 reference environment (manifests/reference/h200-*),
the cpu images the CPU reference run. Where they cannot (the cuda image's Python is Debian 12's 3.11;
the H200 ran 3.12), the build report and `python -m lab image-check` list the difference instead of
leaving a reader to find it in two manifests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.containers.lock import parse_freeze
from lab.host.wheelhouse import normalize
from lab.containers.variants import REPO_ROOT

REFERENCES = {"cpu": "manifests/reference/cpu-2026-12-02-full", "cuda": "manifests/reference/h200-2026-12-02-gpu"}
# The libraries a timing depends on, as the manifest names them (`torch.version`, `libraries.<name>`).
KEY_LIBRARIES = ("torch", "triton", "transformers", "numpy", "jinja2", "matplotlib")


def reference_manifest(family: str, repo: Path = REPO_ROOT) -> tuple[str, dict[str, Any]] | None:
    """(path, manifest) of the family's reference run, None when there is none."""
    rel = REFERENCES.get(family)
    if rel is None or not (repo / rel / "manifest.json").is_file():
        return None
    return f"{rel}/manifest.json", json.loads((repo / rel / "manifest.json").read_text())


def _public(version: str | None) -> str | None:
    """'2.11.0+cu130' -> '2.11.0': pip lists the public version, torch.__version__ adds the local part."""
    return version.split("+", 1)[0] if version else version


def environment_diff(python_version: str, packages: dict[str, str], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """[{field, image, reference}] for Python (major.minor) and the key libraries that differ."""
    out: list[dict[str, Any]] = []
    ref_py = str((reference.get("python") or {}).get("version") or "")
    if ref_py and ".".join(python_version.split(".")[:2]) != ".".join(ref_py.split(".")[:2]):
        out.append({"field": "python.version", "image": python_version, "reference": ref_py})
    installed = {normalize(k): v for k, v in packages.items()}
    for name in KEY_LIBRARIES:
        ref = (reference.get("torch") or {}).get("version") if name == "torch" else \
            (reference.get("libraries") or {}).get(name)
        mine = installed.get(name)
        if _public(ref) != _public(mine):
            out.append({"field": "torch.version" if name == "torch" else f"libraries.{name}", "image": mine,
                        "reference": ref})
    return out


def describe(family: str, python_version: str, package_lines: str) -> dict[str, Any] | None:
    """The image's Python and packages against its family's reference run (None when there is no reference)."""
    found = reference_manifest(family)
    if found is None:
        return None
    path, manifest = found
    diff = environment_diff(python_version, parse_freeze(package_lines), manifest)
    return {"reference": path, "python": python_version, "differs": diff}


def sentence(tag: str, described: dict[str, Any]) -> str:
    if not described["differs"]:
        return f"{tag}: same Python and key libraries as {described['reference']}"
    parts = ", ".join(f"{d['field']} {d['image']} (reference {d['reference']})" for d in described["differs"])
    return f"{tag} differs from the reference environment {described['reference']}: {parts}"
