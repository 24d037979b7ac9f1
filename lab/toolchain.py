"""What this host can compile and run: CUDA, Triton, the C++ compiler Inductor would use, Python headers.

Every NOT_RUN reason of the lab comes from here, so that "not on PATH" is never recorded as
"not installed". The probe is a dataclass that goes into the manifest as it is.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.results import Reason

# Where a C++ compiler commonly lives when it is installed but not on PATH.
OFF_PATH_GLOBS = (
    "/usr/bin/g++*", "/usr/bin/clang++*", "/usr/local/bin/g++*", "/usr/local/bin/clang++*",
    "/usr/lib/llvm-*/bin/clang++", "/opt/rh/gcc-toolset-*/root/usr/bin/g++", "/opt/homebrew/bin/g++*",
    "/opt/conda/bin/x86_64-conda-linux-gnu-c++", "/usr/lib/gcc/x86_64-linux-gnu/*/g++",
)


@dataclass
class CudaInfo:
    available: bool
    device_count: int = 0
    device_name: str | None = None
    capability: str | None = None
    torch_cuda: str | None = None
    why_not: str | None = None


@dataclass
class TritonInfo:
    importable: bool
    version: str | None = None
    why_not: str | None = None


@dataclass
class CxxInfo:
    inductor_setting: str  # what Inductor searches for (torch._inductor.config.cpp.cxx / CXX)
    compiler: str | None  # the one Inductor would use, None if its search fails
    path: str | None  # where it was found on PATH
    version: str | None
    off_path: list[str] = field(default_factory=list)  # compilers that exist but are not on PATH
    python_h: str | None = None  # the Python.h Inductor's C++ code compiles against, if present
    python_include: str = ""
    msvc: dict[str, Any] | None = None  # Windows only (filled by lab.msvc where present)


@dataclass
class Toolchain:
    platform: str
    cuda: CudaInfo
    triton: TritonInfo
    cxx: CxxInfo

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------------ reasons
    def cxx_reason(self) -> Reason | None:
        """Why Inductor's C++ backend cannot work here, or None when it can."""
        cxx = self.cxx
        if cxx.compiler is None:
            if cxx.off_path:
                where = cxx.off_path[0]
                return Reason("compiler_not_on_path",
                              f"C++ compiler installed but not on PATH ({where}): add {os.path.dirname(where)} "
                              f"to PATH or set CXX={where}")
            return Reason("no_cxx_compiler",
                          "no C++ compiler found: install g++ or clang++ (Debian: apt-get install g++), "
                          "or on Windows the Visual Studio Build Tools")
        if cxx.python_h is None:
            return Reason("no_python_headers",
                          f"C++ compiler {cxx.compiler} found but Python.h is missing from {cxx.python_include}: "
                          "install the Python development headers (Debian: apt-get install python3-dev)")
        return None

    def triton_reason(self) -> Reason | None:
        if self.triton.importable:
            return None
        return Reason("no_triton", f"Triton not importable ({self.triton.why_not}): install the triton "
                                   "package that matches this torch build to compile for CUDA")

    def cuda_reason(self) -> Reason | None:
        if self.cuda.available:
            return None
        return Reason("no_cuda", f"no CUDA device ({self.cuda.why_not}): run on a host with an NVIDIA GPU, "
                                 "a CUDA build of torch and the driver (in Docker: --gpus all)")

    def reason_for(self, need: str, device: str) -> Reason | None:
        """The reason a requirement is not met on this host for a run on `device`, or None."""
        if need == "cuda":
            return self.cuda_reason()
        if need == "cxx":
            return self.cxx_reason()
        if need == "triton":
            return self.triton_reason()
        if need == "inductor":
            return self.triton_reason() if device == "cuda" else self.cxx_reason()
        if need == "host":
            return None
        raise ValueError(f"unknown requirement {need!r}")


def _probe_cuda() -> CudaInfo:
    import torch

    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "torch.cuda.is_available() is False"
        return CudaInfo(False, torch_cuda=torch.version.cuda, why_not=why)
    idx = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    return CudaInfo(True, torch.cuda.device_count(), torch.cuda.get_device_name(idx), f"{major}.{minor}",
                    torch.version.cuda)


def _probe_triton() -> TritonInfo:
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising something else
        return TritonInfo(False, why_not=f"{type(exc).__name__}: {exc}".splitlines()[0])
    return TritonInfo(True, version=getattr(triton, "__version__", "unknown"))


def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else None


def find_off_path_compilers(path_env: str | None = None) -> list[str]:
    """Executable C++ compilers on disk whose folder is not on PATH (plus $CXX when it is a path)."""
    path_dirs = {os.path.realpath(p) for p in (path_env if path_env is not None else os.environ.get("PATH", "")).split(os.pathsep) if p}
    found: list[str] = []
    cxx_env = os.environ.get("CXX")
    candidates = [cxx_env] if cxx_env and os.sep in cxx_env else []
    for pattern in OFF_PATH_GLOBS:
        candidates.extend(sorted(glob.glob(pattern)))
    for cand in candidates:
        if os.path.isfile(cand) and os.access(cand, os.X_OK) and os.path.realpath(os.path.dirname(cand)) not in path_dirs:
            if cand not in found:
                found.append(cand)
    return found


def _probe_cxx() -> CxxInfo:
    from torch._inductor import config as inductor_config

    setting = repr(inductor_config.cpp.cxx)
    compiler: str | None
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        compiler = get_cpp_compiler()
    except Exception:  # InvalidCxxCompiler and friends: Inductor found none
        compiler = None
    path = shutil.which(compiler) if compiler else None
    if compiler and path is None and os.path.isfile(compiler):
        path = compiler
    version = _first_line([compiler, "--version"]) if compiler else None
    include = sysconfig.get_paths().get("include", "")
    python_h = os.path.join(include, "Python.h")
    msvc = None
    if sys.platform == "win32":
        from lab import msvc as msvc_mod  # pragma: no cover - Windows only

        msvc = msvc_mod.describe()  # pragma: no cover
    return CxxInfo(
        inductor_setting=setting, compiler=compiler, path=path, version=version,
        off_path=[] if compiler else find_off_path_compilers(),
        python_h=python_h if Path(python_h).is_file() else None, python_include=include, msvc=msvc,
    )


def probe() -> Toolchain:
    import platform

    return Toolchain(platform=platform.platform(), cuda=_probe_cuda(), triton=_probe_triton(), cxx=_probe_cxx())
