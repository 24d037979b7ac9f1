"""Inductor's cache directory: where a compile writes it, and whether it can (standard library and torch only).

Apart from lab.host.compile_cache (the cache as an artefact with provenance) because the toolchain probe asks
`cache_dir_problem` before anything compiles, and compile_cache itself asks the toolchain what made a cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping


def isolated_env(cache_dir: str | Path) -> dict[str, str]:
    """Environment for a child whose compile caches live only in `cache_dir` (FX graph cache forced on)."""
    cache_dir = str(cache_dir)
    return {
        "TORCHINDUCTOR_CACHE_DIR": cache_dir,
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
    }


def inductor_cache_dir() -> str:
    """The directory Inductor's caches live in, as the installed torch computes it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return cache_dir()
    except Exception:  # older layouts
        return os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")


def configured_cache_dir(environ: Mapping[str, str], real: bool) -> str | None:
    """The cache directory a compile would write: TORCHINDUCTOR_CACHE_DIR, else (for this process) torch's default."""
    if environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return environ["TORCHINDUCTOR_CACHE_DIR"]
    return (inductor_cache_dir() or None) if real else None


def cache_dir_problem(path: str) -> str | None:
    """Why a compile cannot write its cache in `path` (None: it can). Nothing is written: the nearest existing folder
    must be a directory this process may write (the kernel answers EROFS for a read-only mount)."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is read-only for this process" if folder == Path(path).absolute() else \
            f"it does not exist and {folder} is read-only for this process"
    return None
