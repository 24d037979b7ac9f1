"""Writing the site: every page atomically, the whole site built in a folder beside `--out` and swapped in
only when complete.

`write_page(path, text)` writes next to the destination and renames into place, so a reader (or a full
disk) never leaves half a page. `Staging(out)` is the temporary folder a report is rendered into; `swap_in`
moves its pages into `out` one rename each (the previous site stays whole until then: a failed or empty
render never touches it) and removes the pages an earlier report left that this one did not write. Only the
site's own names are ever replaced or removed in `out` (index.html, compare.html, history.html, run-*.html and
the traces/ folder this report writes), so other files a user keeps there survive: a traces/ there that an
earlier report did not write (no MARKER in it: a run folder's raw traces, a user's folder) is never moved or
removed, the new site is refused instead (WriteError naming it). The staging folder holds a lock (lab.locks) while
its report runs; one left by a killed report is removed by the next report into the same `out`.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
from pathlib import Path

from lab.atomic import umask
from lab.locks import OWNER_NAME, OwnerLock, clean_abandoned_tempdirs

PAGE_PATTERNS = ("index.html", "compare.html", "history.html", "run-*.html")
TRACES = "traces"
MARKER = ".written-by-lab-report"  # in traces/: an old traces/ folder is removed only when it carries this


class WriteError(OSError):
    """Writing into the site failed (a full disk, a read-only folder): a site problem, never a run's."""


def _write_all(handle: object, data: bytes) -> None:
    """Write every byte (a separate function so a test can make the disk full here)."""
    handle.write(data)  # type: ignore[attr-defined]


def write_bytes(path: Path, data: bytes) -> None:
    """`data` written beside `path` and renamed into place; WriteError, with nothing left behind, on failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from None
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as handle:
            _write_all(handle, data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_page(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


class Staging:
    """A temporary folder beside `out` to render into; `swap_in` publishes it, `discard` removes it."""

    def __init__(self, out: Path) -> None:
        self.out = out
        parent = out.absolute().parent
        prefix = f".{out.absolute().name}."
        try:
            parent.mkdir(parents=True, exist_ok=True)
            clean_abandoned_tempdirs(str(parent), f"{glob.escape(prefix)}*.staging")  # left by killed reports
            self.root = Path(tempfile.mkdtemp(prefix=prefix, suffix=".staging", dir=parent))
            self.lock = OwnerLock(self.root / OWNER_NAME)
            self.lock.acquire(kind="report-staging")
        except OSError as exc:
            raise WriteError(exc.errno, exc.strerror or str(exc), str(parent)) from None

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.lock.release()

    def swap_in(self) -> list[Path]:
        """Move every page of the staged site into `out`; remove the earlier report's pages not rewritten.
        Returns the pages removed."""
        out = self.out
        try:
            out.mkdir(parents=True, exist_ok=True)
            written = {p.name for p in self.root.iterdir()} - {OWNER_NAME}
            old = out / TRACES
            ours = old.is_dir() and not old.is_symlink() and (old / MARKER).is_file()
            if TRACES in written and (old.exists() or old.is_symlink()) and not ours:
                raise OSError(errno.EEXIST, f"holds a {TRACES}/ that lab report did not write (no {MARKER} in it), "
                                            "which the site's traces would replace: move it, or choose another --out",
                              str(old))
            for name in sorted(written - {TRACES}):
                os.replace(self.root / name, out / name)
            if TRACES in written:
                if ours:
                    os.replace(old, self.root / ".old-traces")
                os.replace(self.root / TRACES, old)
            removed = remove_stale(out, written)
        except OSError as exc:
            raise WriteError(exc.errno, exc.strerror or str(exc), str(out)) from None
        finally:
            self.discard()
        return removed


def remove_stale(out: Path, written: set[str]) -> list[Path]:
    """Remove the pages (and the traces/ folder) an earlier report left in `out` that this one did not write."""
    removed = []
    for pattern in PAGE_PATTERNS:
        for page in sorted(out.glob(pattern)):
            if page.name not in written and (page.is_file() or page.is_symlink()):
                page.unlink()
                removed.append(page)
    old = out / TRACES
    if TRACES not in written and old.is_dir() and not old.is_symlink() and (old / MARKER).is_file():
        shutil.rmtree(old)
        removed.append(old)
    return removed
