"""A run directory: owned by one run at a time, never silently overwritten.

`claim(out, resume=..., force=...)` is what `lab run` does before it writes anything:
- `out` must be a directory the lab can write (or be creatable); anything else is one line.
- It takes the directory's lock (`.lab-run.lock`, lab.locks): a second run into the same directory
  refuses with one line naming the holder's pid and host. The kernel drops the lock when the
  holder dies, so a killed run never leaves the directory blocked.
- A directory that already holds a run (results.json or manifest.json) is refused unless the user
  says what to do with it: `resume` loads it (its OK records are kept, the rest rerun; a run that
  saved only its manifest, killed or out of space before its first results, starts afresh there),
  `force` moves it aside to `<out>.old-<timestamp>` (never deleted) and starts afresh.
- The temporary files of a save that was killed half-way (`.results.json.*.tmp`, lab.atomic) are
  removed once the lock is held: nobody else can be writing them.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lab.locks import OwnerLock, describe_holder
from lab.permissions import permission_denied
from lab.contract.results import MANIFEST_NAME, RESULTS_NAME, Results, ResultsError, load
from lab.contract.schema import read_json

LOCK_NAME = ".lab-run.lock"


class RunDirError(ValueError):
    """The run directory cannot be used as asked; the message is one line naming it."""


@dataclass
class Claim:
    """A run directory this process owns until `release()`: the lock, and the run found there (resume)."""

    out: Path
    lock: OwnerLock
    previous: Results | None = None  # the run being resumed
    moved_to: Path | None = None  # where --force moved the old run
    removed: list[Path] = field(default_factory=list)  # temporary files of killed saves, removed
    manifest_only: bool = False  # --resume of a run that had saved only its manifest: started afresh

    def release(self) -> None:
        self.lock.release()


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def remove_stray_temporaries(out: Path) -> list[Path]:
    """Remove what a killed atomic save of results.json or manifest.json left (`.NAME.*.tmp`); the caller holds the
    directory's lock. Returns what was removed."""
    removed = []
    for name in (RESULTS_NAME, MANIFEST_NAME):
        for path in sorted(out.glob(f".{name}.*.tmp")):
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass  # left for the next start; it is never read
    return removed


def saved_manifest(out: Path) -> dict[str, Any]:
    """The manifest saved in `out`, or {} when it cannot be read (cut short by a kill)."""
    try:
        data = read_json(out / MANIFEST_NAME)
    except ResultsError:
        return {}
    return data if isinstance(data, dict) else {}


def _aside(out: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    cand, n = out.with_name(f"{out.name}.old-{stamp}"), 2
    while cand.exists():
        cand, n = out.with_name(f"{out.name}.old-{stamp}-{n}"), n + 1
    return cand


def _lock(out: Path) -> OwnerLock:
    lock = OwnerLock(out / LOCK_NAME)
    try:
        holder = lock.acquire(out=str(out))
    except PermissionError:  # the fix depends on where the lab runs (in an image: the mount's owner)
        raise RunDirError(f"{permission_denied(out)} (--out: cannot write there)") from None
    except OSError as exc:
        if exc.filename == str(lock.path) and exc.errno in (errno.ELOOP, errno.EINVAL):  # not a file of its own
            raise RunDirError(f"--out {out}: its lock file {LOCK_NAME} is {_why(exc)}: remove it, or choose another "
                              "--out") from None
        raise RunDirError(f"--out {out}: cannot write there ({_why(exc)}): choose a directory you can write") \
            from None
    if holder is not None:
        raise RunDirError(f"--out {out}: another run is writing there ({describe_holder(holder)}): wait for it to "
                          f"finish, stop it, or choose another --out")
    return lock


def claim(out: Path, resume: bool = False, force: bool = False) -> Claim:
    """Own `out` for a run (see the module's docstring); RunDirError (one line) when it cannot be used."""
    if resume and force:
        raise RunDirError("--resume and --force: choose one (resume keeps the run's OK records, force moves the "
                          "whole run aside)")
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out}: is a file, not a directory (a run writes a directory of files)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {out}: cannot create the directory ({_why(exc)})") from None
    lock = _lock(out)
    try:
        removed = remove_stray_temporaries(out)
        if not ((out / RESULTS_NAME).exists() or (out / MANIFEST_NAME).exists()):
            return Claim(out, lock, removed=removed)
        if resume and not (out / RESULTS_NAME).exists():  # only the manifest: no record was ever saved
            return Claim(out, lock, removed=removed, manifest_only=True)
        if resume:
            try:
                previous = load(out)
            except ResultsError as exc:
                raise RunDirError(f"--resume: cannot resume from {exc}") from None
            return Claim(out, lock, previous=previous, removed=removed)
        if force:
            aside = _aside(out)
            try:
                os.rename(out, aside)
            except OSError as exc:
                raise RunDirError(f"--force: cannot move {out} aside to {aside} ({_why(exc)})") from None
            lock.move_to(aside / LOCK_NAME)  # still held: nobody starts a run in the old directory meanwhile
            try:
                out.mkdir(parents=True)
                new_lock = _lock(out)
            finally:
                lock.release()
            return Claim(out, new_lock, moved_to=aside, removed=removed)
        what = "results.json" if (out / RESULTS_NAME).exists() else "manifest.json"
        raise RunDirError(f"--out {out}: already holds a run ({what}): add --resume to keep its OK records and "
                          f"rerun the rest, --force to move it aside (to {out.name}.old-<time>), or choose another "
                          f"--out")
    except BaseException:
        lock.release()
        raise
