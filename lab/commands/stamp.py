"""`python -m lab stamp [--out FILE]`: record which commit this clean tree is, for a copy whose .git is stale or absent.

Writes {commit, source_sha256, made_at} (default build/lab-stamp.json, which git ignores). A run of a copy
of the tree finds it (LAB_STAMP=FILE, else the default path) and, when the sources' digest is the stamp's,
records the stamp's commit with `dirty: false` (lab.run.stamp). Refused (exit 2, one line) where git cannot
say the tree is clean: uncommitted changes, files of lab/ or report/ git does not track, or no git.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("stamp", help="record this clean tree's commit and source digest for a copy without a "
                                     "current .git")
    p.add_argument("--out", type=Path, help="the stamp file (default: build/lab-stamp.json in the repository; a "
                                            "run reads it there, or where LAB_STAMP names it)")
    return p


def clean_commit(repo_root: Path) -> str:
    """HEAD's commit where the tree is clean; ValueError (one line) otherwise."""
    from lab.host.hostinfo import run_text
    from lab.run.stamp import unclean

    commit = run_text(["git", "rev-parse", "HEAD"], repo_root)
    if commit is None:
        raise ValueError(f"stamp: {repo_root} is not a git checkout git can read: make the stamp in the checkout "
                         "the tree was copied from")
    why = unclean(repo_root)
    if why is None:
        raise ValueError(f"stamp: git cannot say whether {repo_root} is clean (`git status` failed)")
    if why:
        raise ValueError(f"stamp: the tree has {why}: commit them (or stash them) first, a stamp records a commit")
    return commit


def main(args: argparse.Namespace) -> int:
    from lab.run import stamp
    from lab.run.manifest import REPO_ROOT, now_iso, source_digest

    commit = clean_commit(REPO_ROOT)
    path = args.out or stamp.default_path(REPO_ROOT)
    if path.is_dir():
        raise ValueError(f"--out {path}: is a directory; give the stamp's file name")
    written = stamp.write(path, stamp.make(commit, source_digest(), now_iso()))
    print(f"{written}: commit {commit[:12]}; a run of a copy of this tree records it while the sources are these "
          f"(LAB_STAMP={written} where it is not the default path)", file=sys.stderr)
    print(written)
    return 0
