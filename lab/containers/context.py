"""The build context an image is built from: the lab's tracked files, docker/, the CA bundle, the wheels.

Also the lab's commit as an image records it (`-dirty` when tracked files differ from HEAD, since
the image holds the working tree).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lab.containers.engine import call
from lab.containers.pipconf import PipSettings
from lab.containers.variants import REPO_ROOT


def lab_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's commit, with `-dirty` when tracked files differ from it (the image holds the working tree)."""
    head = call(["git", "-C", str(repo), "rev-parse", "HEAD"])
    if head is None or head.returncode != 0:
        return os.environ.get("LAB_COMMIT", "unknown")
    status = call(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])
    dirty = bool(status and status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def tracked_files(repo: Path = REPO_ROOT) -> list[str]:
    out = call(["git", "-C", str(repo), "ls-files", "-z"])
    if out is None or out.returncode != 0:
        raise FileNotFoundError(f"{repo}: not a git checkout; the image build copies the lab's tracked files")
    return [p for p in out.stdout.split("\0") if p]


def stage_context(dest: Path, pip: PipSettings, repo: Path = REPO_ROOT) -> dict[str, object]:
    """Make the build context: src/ (the lab's tracked files), docker/, extra/pip-ca.pem, extra/wheels/.

    Wheels are hard-linked where the file system allows (no copy of a 200 MB torch wheel), and
    files already staged with the same size and mtime are kept, so that Docker's layer cache hits.
    """
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "src"
    wanted: set[Path] = set()
    for rel in tracked_files(repo):
        source = repo / rel
        if not source.is_file():
            continue  # deleted in the working tree
        wanted.add(src / rel)
        _sync_file(source, src / rel)
    (dest / "docker").mkdir(exist_ok=True)
    for f in (repo / "docker").glob("*"):
        if f.is_file():
            wanted.add(dest / "docker" / f.name)
            _sync_file(f, dest / "docker" / f.name)
    extra = dest / "extra"
    (extra / "wheels").mkdir(parents=True, exist_ok=True)
    if pip.cert:
        wanted.add(extra / "pip-ca.pem")
        _sync_file(Path(pip.cert), extra / "pip-ca.pem")
    wheels = []
    for house in pip.wheelhouses:
        for whl in sorted(Path(house).glob("*.whl")):
            wanted.add(extra / "wheels" / whl.name)
            _sync_file(whl, extra / "wheels" / whl.name, link=True)
            wheels.append(whl.name)
    for f in list(dest.rglob("*")):  # drop what a previous staging left behind
        if f.is_file() and f not in wanted:
            f.unlink()
    return {"files": len(wanted), "wheels": wheels, "cert": bool(pip.cert)}


def _sync_file(source: Path, target: Path, link: bool = False) -> None:
    st = source.stat()
    if target.exists():
        tt = target.stat()
        if tt.st_size == st.st_size and int(tt.st_mtime) == int(st.st_mtime):
            return
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)
