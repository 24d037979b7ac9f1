"""`python -m lab stamp` (lab/commands/stamp.py): a clean checkout's commit and source digest; refused otherwise.

Each test makes a git repository of its own (lab/ and report/ with one file each) and points the lab's
REPO_ROOT at it, so the answer does not depend on the state of the checkout the tests run in.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli, one_line_error

from lab.run import manifest


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "checkout"
    (root / "lab").mkdir(parents=True)
    (root / "report").mkdir()
    (root / "lab" / "a.py").write_text("A = 1\n")
    (root / "report" / "page.html").write_text("<p>\n")
    (root / ".gitignore").write_text("build/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    monkeypatch.setattr(manifest, "REPO_ROOT", root)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git never finds a repository around tmp_path
    return root


def test_a_clean_tree_gets_its_commit_and_digest_in_build(repo: Path, capsys) -> None:
    rc, err = cli(capsys, "stamp")
    path = repo / "build" / "lab-stamp.json"
    assert rc == 0 and str(path) in err
    stamp = json.loads(path.read_text())
    assert set(stamp) == {"commit", "source_sha256", "made_at"}
    assert stamp["commit"] == git(repo, "rev-parse", "HEAD") and stamp["source_sha256"] == manifest.source_digest()
    assert git(repo, "status", "--porcelain") == ""  # build/ is ignored: the stamp leaves the tree clean


def test_out_names_the_file(repo: Path, tmp_path: Path, capsys) -> None:
    rc, _ = cli(capsys, "stamp", "--out", str(tmp_path / "elsewhere" / "s.json"))
    assert rc == 0 and json.loads((tmp_path / "elsewhere" / "s.json").read_text())["commit"] == git(repo, "rev-parse",
                                                                                                     "HEAD")
    assert not (repo / "build").exists()


@pytest.mark.parametrize("change, said", [
    (lambda r: (r / "lab" / "a.py").write_text("A = 2\n"), "uncommitted changes (M lab/a.py)"),
    (lambda r: (r / "report" / "new.css").write_text("p {}\n"), "untracked sources (report/new.css)"),
])
def test_a_dirty_tree_is_refused_in_one_line(repo: Path, capsys, change, said: str) -> None:
    change(repo)
    err = one_line_error(capsys, "stamp")
    assert said in err and "commit them" in err
    assert not (repo / "build").exists()


def test_an_untracked_source_makes_a_run_dirty_as_it_makes_the_stamp_refuse(repo: Path, capsys) -> None:
    """Issue 30, B6: `python -m lab` imports an untracked lab/commands/zzprobe.py, yet the manifest said clean."""
    assert manifest.git_info()["dirty"] is False
    (repo / "lab" / "zzprobe.py").write_text("B = 1\n")
    assert manifest.git_info()["dirty"] is True
    assert "untracked sources (lab/zzprobe.py)" in one_line_error(capsys, "stamp")


def test_a_tree_without_git_is_refused(repo: Path, capsys) -> None:
    import shutil

    shutil.rmtree(repo / ".git")
    assert "is not a git checkout" in one_line_error(capsys, "stamp")
