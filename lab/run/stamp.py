"""The source stamp: which commit a copy of the lab's tree is, for a host where .git is stale or absent.

A tree sent to another machine may carry an old .git (git then reports an old commit, dirty) or none.
`python -m lab stamp`, run in a clean checkout, writes {commit, source_sha256, made_at} (default
build/lab-stamp.json, which git ignores and a copy of the tree carries along). A run reads the stamp
named by LAB_STAMP, else the default one, and trusts it only when its `source_sha256` equals the
digest of the sources it runs (lab.run.manifest.source_digest): then the manifest records the stamp's
commit, `dirty: false`, `source: "stamp"`. A stamp that does not match changes nothing but its own
field, `lab.stamp`, which says so (never a false clean).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lab import untrusted
from lab.atomic import write_json_atomic

STAMP_ENV = "LAB_STAMP"
MAX_STAMP_BYTES = 64 << 10  # a stamp is three short fields
DEFAULT_NAME = Path("build") / "lab-stamp.json"


def default_path(repo_root: Path) -> Path:
    return repo_root / DEFAULT_NAME


def make(commit: str, source_sha256: str, made_at: str) -> dict[str, str]:
    return {"commit": commit, "source_sha256": source_sha256, "made_at": made_at}


def unclean(repo_root: Path) -> str | None:
    """What keeps the tree from being clean, as one phrase ('uncommitted changes (M lab/x.py ...)', 'untracked
    sources (?? lab/y.py)'); '' when it is clean; None when git cannot say. Files of lab/ and report/ that git does
    not track count: `python -m lab` imports them. The one test of a clean tree, for the manifest and the stamp."""
    from lab.host.hostinfo import run_text

    changed = run_text(["git", "status", "--porcelain", "--untracked-files=no"], repo_root)
    untracked = run_text(["git", "ls-files", "--others", "--exclude-standard", "--", "lab", "report"], repo_root)
    if changed is None or untracked is None:
        return None
    if not (changed or untracked):
        return ""
    lines = (changed or untracked).splitlines()
    return (f"{'uncommitted changes' if changed else 'untracked sources'} ({lines[0].strip()}"
            f"{' ...' if len(lines) > 1 else ''})")


def write(path: Path, stamp: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, stamp)
    return path


def where(repo_root: Path) -> tuple[Path, bool]:
    """The stamp to read: (LAB_STAMP's file, True) where it is set, else (the default path, False)."""
    named = os.environ.get(STAMP_ENV)
    return (Path(named), True) if named else (default_path(repo_root), False)


def read(path: Path) -> dict[str, str]:
    """The stamp in `path`; ValueError (one line naming the file) when it cannot be read or is not a stamp."""
    try:
        data = json.loads(untrusted.read_text(path, MAX_STAMP_BYTES))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the stamp ({exc.strerror or type(exc).__name__})") from None
    except ValueError:  # not UTF-8 or not JSON
        raise ValueError(f"{path}: not a stamp (not JSON)") from None
    if not (isinstance(data, dict) and all(isinstance(data.get(k), str) and data.get(k)
                                           for k in ("commit", "source_sha256", "made_at"))):
        raise ValueError(f"{path}: not a stamp (it needs commit, source_sha256 and made_at, as `python -m lab "
                         "stamp` writes them)")
    return {k: data[k] for k in ("commit", "source_sha256", "made_at")}


def field(repo_root: Path, digest: str) -> dict[str, Any] | None:
    """The manifest's `lab.stamp`: the stamp found, whether it matches the sources (`matched`), and why not; None
    when there is none (no LAB_STAMP and no default file)."""
    path, named = where(repo_root)
    if not named and not path.is_file():
        return None
    try:
        stamp = read(path)
    except ValueError as exc:
        return {"path": str(path), "matched": False, "why": str(exc)}
    out: dict[str, Any] = {"path": str(path), **stamp, "matched": stamp["source_sha256"] == digest}
    if not out["matched"]:
        out["why"] = (f"the stamp's source_sha256 {stamp['source_sha256'][:12]} is not these sources' "
                      f"{digest[:12]}: the tree changed since `python -m lab stamp`, so its commit is not recorded")
    return out
