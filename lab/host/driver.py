"""The NVIDIA driver against the CUDA version a torch build (or an image) needs: found, and old enough?

A CUDA build of torch ships its own CUDA runtime (the nvidia-* wheels) but uses the host's driver,
which must support that CUDA major version. Under CUDA's minor-version compatibility any driver of
a major release's branch runs every minor release of it, so the rule is: the CUDA version the driver
supports (cuDriverGetVersion) has at least the build's major version; when that cannot be asked,
the driver's version is compared with the first driver of the build's major release (CUDA Toolkit
release notes, "CUDA Toolkit and Corresponding Driver Versions", Linux x86_64).

Standard library only: the container tools check the host's driver before starting an image.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
from typing import Callable
from pathlib import Path

from lab.contract.reasons import Code, Reason

# The first Linux driver of each CUDA major release (minor-version compatibility holds from there on).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def version_tuple(text: str | None) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6); '13.0' -> (13, 0); () for None or no digits."""
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


def min_driver(cuda: str | None) -> str | None:
    """The first Linux driver that runs CUDA `cuda` ('13.0' -> '580.65.06'), None when unknown."""
    major = version_tuple(cuda)[:1]
    return MIN_DRIVER.get(major[0]) if major else None


def driver_version(run: Callable[[], str | None] | None = None, proc: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA driver's version: nvidia-smi's answer, else the kernel module's; None without a driver."""
    try:
        out = (run or _nvidia_smi)()
    except (OSError, subprocess.SubprocessError):
        out = None
    if out:
        return out.strip().splitlines()[0].strip()
    try:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc.read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def _nvidia_smi() -> str | None:
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout if out.returncode == 0 else None


def driver_cuda_version() -> str | None:
    """The newest CUDA version the installed driver supports ('13.0'), asked of libcuda; None without it."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        value = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0 or value.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{value.value // 1000}.{(value.value % 1000) // 10}"


def driver_reason(needs_cuda: str | None, driver: str | None, driver_cuda: str | None,
                  what: str = "this torch build") -> Reason | None:
    """`driver_too_old` naming both versions when the driver cannot run CUDA `needs_cuda`; else None.

    No driver at all is not this reason (that is no_cuda); neither is a build without CUDA.
    """
    need = version_tuple(needs_cuda)
    if not need or (driver is None and driver_cuda is None):
        return None
    minimum = min_driver(needs_cuda)
    too_old = (version_tuple(driver_cuda)[:1] < need[:1] if driver_cuda is not None
               else minimum is not None and version_tuple(driver) < version_tuple(minimum))
    if not too_old:
        return None
    have = f"NVIDIA driver {driver or '(version unknown)'}" + (f" (supports CUDA up to {driver_cuda})"
                                                               if driver_cuda else "")
    want = f"driver >= {minimum}" if minimum else f"a driver supporting CUDA {need[0]}.x"
    return Reason(Code.DRIVER_TOO_OLD, f"{what} needs CUDA {needs_cuda}, i.e. {want}, but this host has the {have}: "
                                       f"upgrade the driver (or use a torch build for the CUDA version the driver "
                                       f"supports)")
