"""Finding and loading runs: every results.json under the paths given, each loaded strictly.

A file that cannot be used becomes a `SkippedFile` (path and the one-line reason) instead of
stopping the report: the other runs still render, and the index lists what was skipped and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lab.results import MANIFEST_NAME, RESULTS_NAME, Results, ResultsError, load

DEFAULT_ROOTS = ("manifests", "runs")


@dataclass
class Run:
    """One loaded run: where it came from, a display name, a file-name-safe slug, its results."""

    path: Path
    name: str
    slug: str
    results: Results


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str  # one line; it names the file


def _candidates(path: Path) -> tuple[list[tuple[Path, str]], list[SkippedFile]]:
    """(results files with display names, problems) for one path the user gave."""
    if path.is_file():
        if path.name == MANIFEST_NAME:
            return [], [SkippedFile(str(path), f"{path}: a manifest alone is not a run (give its run directory)")]
        return [(path, path.parent.name if path.name == RESULTS_NAME else path.stem)], []
    if not path.exists():
        return [], [SkippedFile(str(path), f"{path}: no such file or directory")]
    if (path / RESULTS_NAME).exists():
        return [(path / RESULTS_NAME, path.resolve().name)], []
    found = sorted(path.rglob(RESULTS_NAME))
    if not found:
        return [], [SkippedFile(str(path), f"{path}: no {RESULTS_NAME} found under this directory")]
    return [(f, str(f.parent.relative_to(path))) for f in found], []


def slugify(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"


def load_runs(paths: list[Path]) -> tuple[list[Run], list[SkippedFile]]:
    """Load every run under `paths` (in the order given); unusable files are skipped with a reason."""
    runs: list[Run] = []
    skipped: list[SkippedFile] = []
    seen: set[Path] = set()
    slugs: set[str] = set()
    for root in paths:
        found, problems = _candidates(root)
        skipped += problems
        for file, name in found:
            if file.resolve() in seen:
                continue
            seen.add(file.resolve())
            try:
                results = load(file)
            except ResultsError as exc:
                skipped.append(SkippedFile(str(file), str(exc)))
                continue
            slug, n = slugify(name), 2
            while slug in slugs:
                slug, n = f"{slugify(name)}-{n}", n + 1
            slugs.add(slug)
            runs.append(Run(path=file, name=name, slug=slug, results=results))
    return runs, skipped


def default_paths(base: Path | None = None) -> list[Path]:
    """The committed reference runs and the local ones, where those folders exist."""
    base = base or Path.cwd()
    return [base / root for root in DEFAULT_ROOTS if (base / root).is_dir()]
