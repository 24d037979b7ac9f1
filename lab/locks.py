"""An exclusive lock held by one process, saying who holds it; the kernel drops it when the holder dies.

`OwnerLock(path).acquire()` takes the lock or returns what the holder wrote (pid, host, since,
command). The lock is `flock` on the file (POSIX): a run killed by SIGKILL or a power cut holds
nothing afterwards, so nobody ever has to delete a stale lock by hand. Where `fcntl` is missing
(Windows) the file is created exclusively and a holder on this host whose pid is gone is stale.

Used for run directories (lab.run.rundir: one run at a time) and the lab's temporary directories
(lab.run.childproc: a directory whose lock nobody holds belongs to a dead run and is removed).
Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from lab import untrusted

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def whoami(**extra: Any) -> dict[str, Any]:
    """What a holder writes into its lock: pid, host, since (ISO 8601, UTC), and the command."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv)[:300], **extra}


def describe_holder(holder: dict[str, Any]) -> str:
    """'pid 1234 on host vm since 2026-11-29T10:00:00+00:00' (what is known of it)."""
    since = f" since {holder['since']}" if holder.get("since") else ""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}"


MAX_LOCK_BYTES = 64 << 10  # what a holder writes is a few hundred bytes


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(untrusted.read_text(path, MAX_LOCK_BYTES) or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


class OwnerLock:
    """An exclusive lock on `path` that names its holder (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self, **extra: Any) -> dict[str, Any] | None:
        """Take the lock: None when taken, else what the holder wrote (possibly {} if it is still writing).

        OSError (permission denied, read-only file system; a lock file that is a link, not a regular file or has
        other hard links: lab.untrusted, never written) propagates: the caller names the folder."""
        if self._fd is not None:
            return None
        if fcntl is None:  # pragma: no cover - Windows
            return self._acquire_exclusive(extra)
        for _ in range(20):  # the file can be replaced between open and lock by a holder releasing it
            fd = untrusted.open_or_create(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = _read(self.path)
                if not holder:  # the holder has the lock but has not written yet
                    time.sleep(0.05)
                    holder = _read(self.path)
                return holder
            try:
                now = os.lstat(self.path)
            except FileNotFoundError:
                now = None
            st = os.fstat(fd)
            if now is None or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                os.close(fd)  # locked a file its holder unlinked on release: try the new one
                continue
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(whoami(**extra)).encode())
            self._fd = fd
            return None
        raise OSError(f"{self.path}: could not take the lock (it kept being replaced)")

    def _acquire_exclusive(self, extra: dict[str, Any]) -> dict[str, Any] | None:  # pragma: no cover - Windows
        for _ in range(2):
            try:
                fd = untrusted.create_new(self.path)
            except FileExistsError:
                holder = _read(self.path)
                if holder.get("host") == socket.gethostname() and not _pid_alive(holder.get("pid")):
                    self.path.unlink(missing_ok=True)  # its holder is gone
                    continue
                return holder
            os.write(fd, json.dumps(whoami(**extra)).encode())
            self._fd = fd
            return None
        return _read(self.path)

    def release(self) -> None:
        """Drop the lock and remove its file (a holder that died leaves the file, but no lock on it)."""
        if self._fd is None:
            return
        with suppress(OSError):
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def move_to(self, path: Path) -> None:
        """After the folder holding the lock file was renamed: where the (still held) lock file now is."""
        self.path = Path(path)

    def __enter__(self) -> OwnerLock:
        holder = self.acquire()
        if holder is not None:
            raise OSError(f"{self.path}: held by {describe_holder(holder)}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def is_abandoned(path: Path) -> bool:
    """Whether the lock file at `path` exists and nobody holds it (its holder died without releasing it)."""
    if not path.exists():
        return False
    probe = OwnerLock(path)
    try:
        holder = probe.acquire()
    except OSError:
        return False
    if holder is not None:
        return False
    probe.release()
    return True


# ---------------------------------------------------------------------------- the lab's temporary directories

OWNER_NAME = ".lab-owner"
TEMP_PREFIX = "lab-"
GRACE_S = 30.0  # a directory younger than this may still be taking its lock: never removed


@contextmanager
def owned_tempdir(kind: str, root: str | None = None) -> Iterator[Path]:
    """A temporary directory `lab-<kind>-XXXX` whose lock this process holds while it exists.

    Removed on the way out; if the process is killed first, `clean_abandoned_tempdirs` (called when the
    next run starts) finds nobody holding its lock and removes it."""
    path = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{kind}-", dir=root))
    lock = OwnerLock(path / OWNER_NAME)
    try:
        lock.acquire(kind=kind)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        lock.release()


def _abandoned_dir(path: Path) -> bool:
    """Whether `path` is a lab temporary directory whose owner died: a real directory (not a link) of this user
    whose `.lab-owner` is a regular file (a link there is never followed) nobody holds, older than GRACE_S."""
    st = path.lstat()
    owner = path / OWNER_NAME
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False
    ost = owner.lstat()
    if not stat.S_ISREG(ost.st_mode) or time.time() - ost.st_mtime < GRACE_S:
        return False
    return is_abandoned(owner)


def clean_abandoned_tempdirs(root: str | None = None, pattern: str = f"{TEMP_PREFIX}*") -> list[Path]:
    """Remove the lab's temporary directories (under `root`, default the system's) whose owner died; only this
    user's own, and never through a link (see `_abandoned_dir`)."""
    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = sorted(base.glob(pattern))
    except OSError:
        return removed
    for path in candidates:
        try:
            if _abandoned_dir(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        except OSError:
            continue
    return removed
