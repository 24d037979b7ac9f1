"""One line for a folder or file the lab may not write, with the fix for where it runs (stdlib only: the
command line imports it before anything heavy)."""

from __future__ import annotations

import os


def permission_denied(filename: str | os.PathLike[str] | None) -> str:
    """`WHERE: permission denied for uid U: FIX`; in one of the lab's images (LAB_IMAGE) the fix is the mount's
    owner or `docker run --user`, elsewhere another --out. A file's folder is named, as the folder is the fix."""
    where = str(filename or "a file")
    if filename and not os.path.isdir(where) and os.path.dirname(where):
        where = os.path.dirname(where)
    uid = os.getuid() if hasattr(os, "getuid") else None
    fix = "make it writable for this user or choose another --out"
    if os.environ.get("LAB_IMAGE"):
        fix = (f"the mounted folder must be writable by uid {uid}: on the host run `chown {uid} DIR`, or start the "
               "container with --user \"$(id -u):$(id -g)\" so it writes as you")
    return f"{where}: permission denied for uid {uid}: {fix}"
