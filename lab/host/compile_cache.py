"""Inductor's on-disk compile cache as an artefact with provenance.

A warm first call is only warm for the setting that populated the cache. Inductor's FX graph cache
key (torch._inductor.codecache.FxGraphHashDetails in torch 2.11-2.13) hashes the graph, every
input's shape, stride, dtype and device, a hash of torch's own source, the Inductor config, the
CPU thread count, the default dtype, and for CUDA the device name, CUDA and Triton versions. The
C++ compiler is not in that key; the compiled kernels' own cache (the .so files) is keyed by the
source and the compile command. So a cache is valid for: this torch, this device, these shapes
and dtypes, these settings, and in practice this compiler. `provenance()` writes that down;
`manifest_field()` is the part that holds for every cache of this environment.

`isolated_env(cache_dir)` is the environment a child process gets so that its compile reads and
writes only `cache_dir` (cold: empty, warm: populated by an earlier child).

`lab.host.cache_dir.cache_dir_problem(path)` is the toolchain probe's question: can a compile write its cache there? Every
Inductor compile writes into the cache directory, so one it cannot write (a read-only mount given as
TORCHINDUCTOR_CACHE_DIR) fails every compile; the probe finds it before anything compiles.
"""

from __future__ import annotations

import sys
from typing import Any

from lab.host.cache_dir import inductor_cache_dir
from lab.host.hostinfo import cpu_info
from lab.host.toolchain import probe

# What the FX graph cache key contains, as read in torch 2.11-2.13's codecache.FxGraphHashDetails.
KEY_CONTAINS = (
    "graph code", "input shapes, strides, dtypes and devices", "torch source hash", "inductor config",
    "CPU thread count", "default dtype", "deterministic-algorithm settings",
    "CUDA device name, CUDA and Triton versions (on CUDA)",
)
# Environment variables that would make a child's compile ignore or redirect the cache.
DROP_ENV = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
            "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE")


def cache_counters() -> dict[str, int]:
    """Inductor's FX graph cache hit/miss/bypass counters of this process (names as in the installed torch)."""
    from torch._dynamo.utils import counters

    ind: dict[str, int] = counters.get("inductor", {})
    return {k: int(ind.get(k, 0)) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")}


def _compiler(toolchain: Any) -> dict[str, Any]:
    cxx = toolchain.cxx
    return {"cxx": cxx.compiler, "cxx_path": cxx.path, "cxx_version": cxx.version,
            "triton": toolchain.triton.version if toolchain.triton.importable else None}


def _device(device: str) -> dict[str, Any]:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        idx = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(idx)
        return {"type": "cuda", "name": torch.cuda.get_device_name(idx), "capability": f"{major}.{minor}",
                "cuda": torch.version.cuda}
    info = cpu_info()
    return {"type": "cpu", "name": info.get("model"), "machine": info.get("machine"),
            "threads": torch.get_num_threads()}


def manifest_field(toolchain: Any | None = None, device: str | None = None) -> dict[str, Any]:
    """What any Inductor cache made in this environment is valid for (the manifest's `compile_cache`).

    `device` defaults to CUDA where the toolchain saw a GPU, else the CPU.
    """
    import torch
    import torch._inductor.config as inductor_config

    if toolchain is None:
        toolchain = probe()
    if device is None:
        device = "cuda" if toolchain.cuda.available else "cpu"
    return {
        "cache_dir": inductor_cache_dir(),
        "fx_graph_cache": bool(getattr(inductor_config, "fx_graph_cache", False)),
        "valid_for": {"torch": torch.__version__, "torch_git": torch.version.git_version,
                      "python": sys.version.split()[0], **_compiler(toolchain), "device": _device(device)},
        "key_contains": list(KEY_CONTAINS),
        "note": "a cache moved to another torch, device, compiler, thread count, shape or dtype is not reused "
                "(or must not be trusted): see lab/host/compile_cache.py",
    }


def provenance(target: str, shapes: dict[str, list[int]], dtype: str, device: str,
               toolchain: Any | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    """What one populated cache is valid for: the environment plus the target, shapes and dtype it saw."""
    field = manifest_field(toolchain, device)
    return {"target": target, "shapes": shapes, "dtype": dtype, "cache_dir": cache_dir or field["cache_dir"],
            **field["valid_for"]}
