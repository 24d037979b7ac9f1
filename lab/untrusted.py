"""The one rule for a file in a folder the lab did not create (a run folder, `--out`, a stamp, a lock file).

Anyone may have put anything there: a symbolic link to a file elsewhere, a FIFO that never answers, `/dev/zero`,
a file of gigabytes, a hard link to someone's data. So such a file is

- read with `read_bytes` / `read_text`: opened with O_NOFOLLOW (a link is refused, never followed) and O_NONBLOCK
  (a FIFO cannot hang the open), then accepted only as a regular file (fstat S_ISREG) of at most `limit` bytes,
  read no further than that;
- written only when the lab creates it itself (`create_new`: O_CREAT | O_EXCL | O_NOFOLLOW), or when it is a
  regular file of one link that `open_existing` opens without following a link (the lock files, which outlive
  their holders by design). Whole files are otherwise written beside their destination and renamed into place
  (lab.atomic), which replaces a link rather than following it.

Every refusal is an OSError whose `strerror` says what the file is, with the file as `filename`, so a caller's
`except OSError` names it in one line. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import unicodedata
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has neither links of this kind nor the flag
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NOCTTY = getattr(os, "O_NOCTTY", 0)
MAX_BYTES = 64 << 20  # the default cap: a results.json of the full profile is well under 1 MiB

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _refused(path: Path | str, code: int, why: str) -> OSError:
    return OSError(code, why, str(path))


def _kind(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def _open(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """os.open with the flags that never follow a link nor block, the refusal of a link named as such."""
    try:
        return os.open(path, flags | NOFOLLOW | NONBLOCK | CLOEXEC | NOCTTY, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise _refused(path, errno.ELOOP, "a symbolic link; links are never followed") from None
        raise


def check_regular(fd: int, path: Path | str, single_link: bool = False) -> os.stat_result:
    """fstat of an open file, or OSError (closing `fd`) when it is not a regular file (or, with `single_link`, has
    other hard links: writing it would write someone else's file)."""
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = f"{_kind(st.st_mode)}, not a regular file"
    elif single_link and st.st_nlink != 1:
        why = f"a file with {st.st_nlink} hard links; the lab writes only a file of its own"
    if why is not None:
        os.close(fd)
        raise _refused(path, errno.EINVAL, why)
    return st


def read_bytes(path: Path | str, limit: int = MAX_BYTES) -> bytes:
    """The content of a regular file of at most `limit` bytes, never through a link and never blocking;
    OSError naming the file otherwise (see the module's docstring)."""
    fd = _open(path, os.O_RDONLY)
    st = check_regular(fd, path)
    with os.fdopen(fd, "rb") as handle:
        if st.st_size > limit:
            raise _refused(path, errno.EFBIG, f"{st.st_size:,} bytes, more than the {limit:,} the lab reads")
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise _refused(path, errno.EFBIG, f"more than the {limit:,} bytes the lab reads")
    return data


def read_text(path: Path | str, limit: int = MAX_BYTES) -> str:
    """`read_bytes` as UTF-8; UnicodeDecodeError (a ValueError) for bytes that are not."""
    return read_bytes(path, limit).decode("utf-8")


def create_new(path: Path | str, mode: int = 0o644, flags: int = 0) -> int:
    """A file descriptor (read and write, and `flags`, e.g. O_APPEND) on a file this call created: FileExistsError
    where anything, a link included, is already at `path`."""
    return _open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, mode)


def open_existing(path: Path | str) -> int:
    """A file descriptor (read and write) on the regular file of one link at `path`, never through a link and
    never blocking; OSError naming it otherwise (FileNotFoundError where there is none)."""
    fd = _open(path, os.O_RDWR)
    check_regular(fd, path, single_link=True)
    return fd


def open_or_create(path: Path | str, mode: int = 0o644) -> int:
    """`create_new`, or `open_existing` where a file is already there (a lock file its last holder left)."""
    for _ in range(3):
        with contextlib.suppress(FileExistsError):
            return create_new(path, mode)
        try:
            return open_existing(path)
        except FileNotFoundError:  # removed between the two: try again
            continue
    raise _refused(path, errno.EAGAIN, "kept appearing and disappearing while being opened")


def safe(text: str) -> str:
    """`text` with every control (Cc) and format (Cf) character written as a visible escape (`\\x1b`): a name from a
    folder the lab did not make (an ESC that would recolour the terminal, a carriage return, a bidi override) is
    shown, never interpreted."""
    out = []
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
