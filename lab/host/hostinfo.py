"""Facts about the host the lab runs on, read with the standard library only.

The operating system, the Python interpreter, the CPU, the GPUs as `nvidia-smi` reports them,
whether this is a container, and a digest of the installed packages. `lab.run.manifest` assembles
them with torch's own view into the manifest; `lab.host.compile_cache` reads the CPU's model for a
cache's provenance. Nothing here imports torch or another lab module.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

# nvidia-smi's fields a manifest records of each GPU. `uuid` and `pci.bus_id` name the physical card: two runs on
# machines of one kind (a lent H200, say) may be on different cards, and at batch 1 cards of one kind were seen to
# differ by about half a percent (docs/fused-step.md, item 17), so a comparison can tell a new card from a change.
NVIDIA_SMI_FIELDS = (
    "name", "driver_version", "memory.total", "clocks.max.sm", "clocks.max.mem", "clocks.sm", "clocks.mem",
    "power.limit", "power.max_limit", "pcie.link.gen.current", "compute_cap", "persistence_mode", "uuid", "pci.bus_id",
)


def read_text(path: Path) -> str | None:
    """A file's stripped text, or None when it cannot be read (a /proc or /sys file this OS does not have)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def run_text(cmd: list[str], cwd: Path | None = None) -> str | None:
    """A command's stripped stdout, or None when it cannot run or exits non-zero."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# CPU flags that change which kernels a compiler or library picks (the rest of the list is in the digest).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


def real_hostname() -> str:
    """The machine's name: LAB_HOSTNAME where whoever starts the lab sets it (inside a container the hostname is
    the container's own, often its id; the lab's container runner passes the host's), else this system's."""
    return os.environ.get("LAB_HOSTNAME") or socket.gethostname()


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none): how busy the host was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def usable_cores() -> int | None:
    """The CPU cores this process may run on (its affinity where the OS says, else all of them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def cpu_mhz(cpuinfo: str | None = None) -> float | None:
    """The median of the cores' current clocks in MHz (/proc/cpuinfo's "cpu MHz"); None where the OS does not say."""
    cpuinfo = read_text(Path("/proc/cpuinfo")) if cpuinfo is None else cpuinfo
    values = []
    for line in (cpuinfo or "").splitlines():
        if line.startswith("cpu MHz"):
            try:
                values.append(float(line.split(":", 1)[1]))
            except ValueError:
                continue
    return round(statistics.median(values), 1) if values else None


def host_info() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "real_hostname": real_hostname(), "os": platform.platform(),
            "kernel": platform.release(), "libc": "-".join(platform.libc_ver()), "load_start": load_average()}


def cpu_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, str] | None:
    """The first CPU's cache sizes as the kernel reports them ({'L1d': '32K', 'L2': '512K', ...}); None elsewhere."""
    caches: dict[str, str] = {}
    try:
        for index in sorted(root.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
            caches[f"L{level}{suffix}"] = (index / "size").read_text().strip()
    except OSError:
        return caches or None
    return caches or None


def cpu_flags(cpuinfo: str) -> list[str]:
    """The feature flags of the first CPU in /proc/cpuinfo's text ('flags' on x86, 'Features' on ARM)."""
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return line.split(":", 1)[1].split()
    return []


def python_info() -> dict[str, Any]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable}


def nvidia_smi() -> dict[str, Any] | None:
    """GPU fields from nvidia-smi, one dict per GPU; None when nvidia-smi is absent."""
    out = run_text(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader"])
    if out is None:
        return None
    return {"gpus": [dict(zip(NVIDIA_SMI_FIELDS, (v.strip() for v in line.split(",")))) for line in out.splitlines()]}


def cpu_info() -> dict[str, Any]:
    """The CPU's model, its logical cores and the ones this process may use, and the machine type."""
    cpuinfo = read_text(Path("/proc/cpuinfo"))
    models = (line.split(":", 1)[1].strip() for line in (cpuinfo or "").splitlines() if line.startswith("model name"))
    model = next(models, None) if cpuinfo is not None else platform.processor() or None
    usable = usable_cores()
    flags = cpu_flags(cpuinfo or "")
    return {"model": model, "logical_cores": os.cpu_count(), "usable_cores": usable, "machine": platform.machine(),
            "isa": [f for f in ISA_FLAGS if f in flags] if flags else None,
            "flags_sha256": hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest() if flags else None,
            "caches": cpu_caches()}


def cache_state(cache_dir: str | Path | None) -> dict[str, Any]:
    """Whether a compile cache directory held anything: {'state': 'cold' | 'warm', 'entries': files in it}.

    Recorded at the start of a run, so that compile times of two runs are compared only where the
    cache was in the same state (lab.contract.metrics: setup_s is comparable under `manifest:compile_cache.state`)."""
    entries = sum(len(files) for _, _, files in os.walk(cache_dir)) if cache_dir else 0
    return {"state": "warm" if entries else "cold", "entries": entries}


def container_info() -> dict[str, Any]:
    """Container or host. Images built by the lab set LAB_IMAGE, LAB_IMAGE_VARIANT (and the runner LAB_IMAGE_ID)."""
    markers = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    cgroup = read_text(Path("/proc/1/cgroup")) or ""
    in_container = bool(markers) or any(k in cgroup for k in ("docker", "containerd", "kubepods", "libpod"))
    return {
        "in_container": in_container, "markers": markers,
        "image": os.environ.get("LAB_IMAGE"), "image_id": os.environ.get("LAB_IMAGE_ID"),
        "variant": os.environ.get("LAB_IMAGE_VARIANT"),
        "fallback_reason": os.environ.get("LAB_HOST_FALLBACK"),
    }


def packages_digest() -> dict[str, Any]:
    """sha256 over the sorted name==version list of installed distributions."""
    pairs = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in metadata.distributions()})
    return {"count": len(pairs), "sha256": hashlib.sha256("\n".join(pairs).encode()).hexdigest()}


def version_of(name: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
