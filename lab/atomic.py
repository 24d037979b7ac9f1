"""Writing a JSON file so that no reader ever sees half of it (standard library only).

The file is written next to its destination and renamed into place. JSON has no NaN or infinity:
such floats are stored as the strings "nan", "inf", "-inf" so the file stays strict JSON.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def clean(value: Any) -> Any:
    """`value` in JSON's own types where it has a JSON form: dataclasses as dicts (field by field, nothing
    copied), tuples as lists, non-finite floats as the strings "nan", "inf", "-inf", subclasses of str, int
    and float (enums, numpy scalars) as the plain type. Anything else is left as it is, for the caller to
    refuse (lab.contract.results names the field)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(float(value))
    if isinstance(value, int):
        return value if type(value) is int else int(value)
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: clean(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def umask() -> int:
    """The process's umask (os.umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` next to its destination and rename it into place: readers never see half a file, and a link
    already at `path` is replaced, never followed (the rule for a file the lab writes: lab.untrusted).

    The file gets the permissions any new file gets here (0644 under the usual umask 022), not the
    0600 of a temporary file: results are meant to be read by others."""
    if path.is_dir():  # os.replace would name the temporary file; name the destination instead
        raise IsADirectoryError(errno.EISDIR, "is a directory; give the file to write", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX (Windows files have no such mode bits)
            os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """`data` as strict JSON (`clean`), written by `write_bytes_atomic`."""
    text = json.dumps(clean(data), indent=1, sort_keys=False, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))
