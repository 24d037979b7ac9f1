"""Finding and loading runs: every results.json under the paths given, each loaded strictly.

Every file is treated as hostile and read by lab.untrusted's rule: one that cannot be used (a symbolic
link, never followed; a FIFO or a device; larger than the cap; unreadable, not UTF-8, not JSON, a field
of the wrong type, a number too large for a float, a second record of one experiment, nesting too deep, a
folder that cannot be listed) becomes a `SkippedFile` (the path and a one-line reason naming the file and the field)
instead of stopping the report: the other runs still render, and the index lists what was skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lab.contract.results import MANIFEST_NAME, RESULTS_NAME, Results, ResultsError, load

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


MAX_REASON = 400  # a field path through thousands of nested lists is not a line anyone reads


def _one_line(text: str) -> str:
    """`text` on one line, its middle elided past MAX_REASON characters (the file's name and the why survive)."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else f"{text[:260]} … {text[-120:]}"


def load_one(file: Path) -> Results | SkippedFile:
    """The run in `file`, or why not (one line naming the file): never raises for what the file holds."""
    try:
        return load(file)
    except ResultsError as exc:
        return SkippedFile(str(file), _one_line(str(exc)))
    except RecursionError:
        return SkippedFile(str(file), f"{file}: nested too deeply to read")
    except (ValueError, TypeError, OverflowError, OSError, UnicodeError) as exc:
        return SkippedFile(str(file), _one_line(f"{file}: could not be read ({type(exc).__name__}: {exc})"))


def load_runs(paths: list[Path]) -> tuple[list[Run], list[SkippedFile]]:
    """Load every run under `paths` (in the order given); unusable files are skipped with a reason."""
    runs: list[Run] = []
    skipped: list[SkippedFile] = []
    seen: set[Path] = set()
    slugs: set[str] = set()
    for root in paths:
        try:
            found, problems = _candidates(root)
        except OSError as exc:  # a folder that cannot be listed, a symlink loop
            found, problems = [], [SkippedFile(str(root), f"{root}: cannot be searched for runs "
                                                          f"({exc.strerror or type(exc).__name__})")]
        skipped += problems
        for file, name in found:
            try:
                key = file.resolve()
            except (OSError, RuntimeError):  # a symlink loop
                key = file.absolute()
            if key in seen:
                continue
            seen.add(key)
            results = load_one(file)
            if isinstance(results, SkippedFile):
                skipped.append(results)
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
