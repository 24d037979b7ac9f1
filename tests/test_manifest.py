"""lab/run/manifest.py: a run records its label, the host's load, the compile cache's state and why it fell back to the host."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.contract.results import load


@pytest.mark.slow
def test_a_run_records_label_load_and_cache_state(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LAB_LABEL", raising=False)
    out = tmp_path / "run"
    assert lab_main(["run", "--profile", "smoke", "--only", "recompiles", "--out", str(out), "--label",
                     "h200 after the driver update"]) == 0
    results = json.loads((out / "results.json").read_text())
    m = results["manifest"]
    assert m["label"] == "h200 after the driver update"
    assert m["host"]["real_hostname"] and len(m["host"]["load_start"]) == 3 and len(m["host"]["load_end"]) == 3
    assert m["compile_cache"]["state"] in ("cold", "warm") and isinstance(m["compile_cache"]["entries"], int)
    assert m["cpu"]["caches"] is None or all(isinstance(v, str) for v in m["cpu"]["caches"].values())
    load(out)  # the schema accepts the new fields


def test_host_fallback_reason_reaches_the_manifest(monkeypatch):
    from lab.run.manifest import container_info

    monkeypatch.setenv("LAB_HOST_FALLBACK", "no_docker: the docker CLI is not on PATH")
    assert container_info()["fallback_reason"].startswith("no_docker:")


# ---------------------------------------------------------------------------- the source stamp (lab.run.stamp)

DIGEST = "d" * 64
OLD = "0" * 40  # what a stale .git says
STAMPED = "5" * 40


def _git(monkeypatch, tmp_path: Path, commit: str | None, dirty: bool = True) -> None:
    """git_info's view of the tree: `commit` from git (None: no git), `dirty` its status; the sources' digest DIGEST;
    the repository (and so the default stamp, build/lab-stamp.json) in tmp_path."""
    from lab.run import manifest, stamp

    def run_text(cmd, cwd=None):
        if commit is None:
            return None
        return commit if cmd[:2] == ["git", "rev-parse"] else (" M lab/run/runner.py" if dirty else "")

    monkeypatch.setattr(manifest, "run_text", run_text)
    monkeypatch.setattr(stamp, "unclean", lambda root: None if commit is None else
                        ("uncommitted changes (M lab/run/runner.py)" if dirty else ""))
    monkeypatch.setattr(manifest, "source_digest", lambda: DIGEST)
    monkeypatch.setattr(manifest, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("LAB_STAMP", raising=False)
    monkeypatch.delenv("LAB_COMMIT", raising=False)


def _stamp(path: Path, digest: str = DIGEST) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"commit": STAMPED, "source_sha256": digest, "made_at": "2026-12-01T10:00:00+00:00"}))
    return path


def test_a_matching_stamp_gives_the_commit_a_stale_git_gets_wrong(tmp_path: Path, monkeypatch) -> None:
    from lab.contract.manifest_schema import check_manifest
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, OLD, dirty=True)
    assert git_info()["commit"] == OLD and git_info()["dirty"] is True and "stamp" not in git_info()
    _stamp(tmp_path / "build" / "lab-stamp.json")
    info = git_info()
    assert (info["commit"], info["dirty"], info["source"]) == (STAMPED, False, "stamp")
    assert info["stamp"]["matched"] is True and info["stamp"]["path"] == str(tmp_path / "build" / "lab-stamp.json")
    check_manifest({"manifest_version": 1, "lab": info}, "a manifest")  # the schema knows the field


def test_a_stamp_of_other_sources_changes_nothing_and_says_so(tmp_path: Path, monkeypatch) -> None:
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, OLD, dirty=True)
    _stamp(tmp_path / "build" / "lab-stamp.json", digest="e" * 64)
    info = git_info()
    assert (info["commit"], info["dirty"], info["source"]) == (OLD, True, "git")  # never a false clean
    assert info["stamp"]["matched"] is False and "tree changed since `python -m lab stamp`" in info["stamp"]["why"]
    _git(monkeypatch, tmp_path, None)  # no git at all: nothing, and the stamp's refusal
    info = git_info()
    assert (info["commit"], info["dirty"], info["source"]) == (None, None, None) and info["stamp"]["matched"] is False


def test_lab_stamp_names_the_stamp_and_a_tree_without_git_takes_it(tmp_path: Path, monkeypatch) -> None:
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, None)
    named = _stamp(tmp_path / "carried" / "stamp.json")
    monkeypatch.setenv("LAB_STAMP", str(named))
    info = git_info()
    assert (info["commit"], info["dirty"], info["source"]) == (STAMPED, False, "stamp")
    monkeypatch.setenv("LAB_STAMP", str(tmp_path / "missing.json"))
    info = git_info()
    assert info["commit"] is None and info["stamp"]["matched"] is False and "cannot read the stamp" in info["stamp"]["why"]


@pytest.mark.parametrize("named, said", [("/dev/zero", "a character device"), ("fifo", "a FIFO")])
def test_a_stamp_that_is_not_a_regular_file_is_refused_in_its_field(tmp_path: Path, monkeypatch, named: str,
                                                                     said: str) -> None:
    """Issue 30, B3: LAB_STAMP=/dev/zero ended the run in a MemoryError; a FIFO would hang it."""
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, None)
    if named == "fifo":
        os.mkfifo(tmp_path / named)
    monkeypatch.setenv("LAB_STAMP", str(tmp_path / named))
    why = git_info()["stamp"]["why"]
    assert why == f"{tmp_path / named}: cannot read the stamp ({said}, not a regular file)"


def test_git_saying_clean_stands_beside_a_matching_stamp(tmp_path: Path, monkeypatch) -> None:
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, "a" * 40, dirty=False)  # e.g. a later commit that changed only docs
    _stamp(tmp_path / "build" / "lab-stamp.json")
    info = git_info()
    assert (info["commit"], info["dirty"], info["source"]) == ("a" * 40, False, "git") and info["stamp"]["matched"]


def test_a_file_that_is_not_a_stamp_is_not_used(tmp_path: Path, monkeypatch) -> None:
    from lab.run.manifest import git_info

    _git(monkeypatch, tmp_path, OLD)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "lab-stamp.json").write_text(json.dumps({"commit": STAMPED}))
    info = git_info()
    assert info["commit"] == OLD and info["stamp"]["matched"] is False and "not a stamp" in info["stamp"]["why"]
