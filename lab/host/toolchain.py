"""What this host can compile and run: CUDA, Triton, the C++ compiler Inductor would use, Python headers.

Every NOT_RUN reason of the lab comes from here, so that "not on PATH" is never recorded as
"not installed". The probe is a dataclass that goes into the manifest as it is.

The compiler search mirrors Inductor's own (`torch._inductor.cpp_builder.get_cpp_compiler`):
on Linux and macOS it tries each entry of `torch._inductor.config.cpp.cxx` (`$CXX`, else g++ /
clang++) by running `NAME --version`; on Windows it runs `$CXX` or `cl`. The compiler found must
then build and run a one-line program (lab.host.cxxcheck): one that cannot is `compiler_broken`, and
every message names the variable (CXX, CC) that pointed where. What the probe looks
at (PATH, environment, filesystem root, Python include folder, how commands run) is a `HostView`
so tests can hide the compiler or the headers without touching the machine.
"""

from __future__ import annotations

import glob
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.host.driver import driver_cuda_version, driver_reason, driver_version, min_driver
from lab.host import cxxcheck
from lab.host.hostinfo import version_of
from lab.host.cxxcheck import try_compile_python_extension  # noqa: F401  (re-exported: the toolchain experiment's probe)
from lab.contract.reasons import Code, Reason

# Where a C++ compiler commonly lives when it is installed but not on PATH (relative to a filesystem root).
OFF_PATH_GLOBS = (
    "usr/bin/g++*", "usr/bin/clang++*", "usr/local/bin/g++*", "usr/local/bin/clang++*",
    "usr/lib/llvm-*/bin/clang++", "opt/rh/gcc-toolset-*/root/usr/bin/g++", "opt/homebrew/bin/g++*",
    "opt/homebrew/opt/llvm/bin/clang++", "opt/conda/bin/x86_64-conda-linux-gnu-c++",
    "usr/lib/gcc/x86_64-linux-gnu/*/g++", "usr/bin/x86_64-linux-gnu-g++*", "Library/Developer/CommandLineTools/usr/bin/clang++",
)


@dataclass
class CudaInfo:
    available: bool
    device_count: int = 0
    device_name: str | None = None
    capability: str | None = None
    torch_cuda: str | None = None
    why_not: str | None = None
    driver_version: str | None = None  # the NVIDIA driver (nvidia-smi), None without one
    driver_cuda: str | None = None  # the newest CUDA that driver supports (cuDriverGetVersion)
    min_driver: str | None = None  # the first driver that runs torch_cuda (lab.host.driver.MIN_DRIVER)


@dataclass
class TritonInfo:
    importable: bool
    version: str | None = None
    why_not: str | None = None
    installed_version: str | None = None  # the distribution's version, even when import fails
    torch_requires: str | None = None  # the triton requirement this torch build declares, if any
    cc_env: str | None = None  # $CC as set: Triton builds its launcher with it
    cc_broken: str | None = None  # why $CC cannot build and run a one-line C program (None: works, or CC unset)


@dataclass
class CxxInfo:
    inductor_setting: str  # what Inductor searches for (torch._inductor.config.cpp.cxx / CXX)
    compiler: str | None  # the one Inductor would use, None if its search fails
    path: str | None  # where it was found on PATH
    version: str | None
    off_path: list[str] = field(default_factory=list)  # compilers that exist but are not on PATH
    python_h: str | None = None  # the Python.h Inductor's C++ code compiles against, if present
    python_include: str = ""
    msvc: dict[str, Any] | None = None  # Windows only (lab.host.msvc.describe())
    search: list[str] = field(default_factory=list)  # names tried, in Inductor's order
    cxx_env: str | None = None  # $CXX as set (it overrides the default search)
    inductor_agrees: bool | None = None  # Inductor's own get_cpp_compiler() gave the same answer (None: not asked)
    # torch >= 2.13 hashes precompiled headers by running `openssl sha512` when
    # torch._inductor.config.cpp_cache_precompile_headers is on (seen failing in a container without it)
    precompile_headers: bool | None = None
    openssl: str | None = None
    broken: str | None = None  # what went wrong building and running a one-line program with `path` (None: it works)
    unusable: list[str] = field(default_factory=list)  # compilers Inductor would try that exist but fail --version
    others: list[str] = field(default_factory=list)  # other C++ compilers here (for the fix sentences)


@dataclass
class Toolchain:
    platform: str
    cuda: CudaInfo
    triton: TritonInfo
    cxx: CxxInfo
    os_family: str = sys.platform  # "linux", "win32", "darwin": chooses the fix sentences
    inductor_cache_dir: str | None = None  # where a compile writes its cache (lab.host.compile_cache)
    inductor_cache_problem: str | None = None  # why it cannot write there (None: it can)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------------ reasons
    def cxx_reason(self) -> Reason | None:
        """Why Inductor's C++ backend cannot work here, or None when it can."""
        cxx = self.cxx
        windows = self.os_family == "win32"
        broken = None if windows else cxxcheck.cxx_reason(cxx)
        if broken is not None:
            return broken
        if cxx.compiler is None:
            if cxx.off_path:
                where = cxx.off_path[0]
                if windows:
                    return Reason(Code.COMPILER_NOT_ON_PATH,
                                  f"Visual Studio's compiler is installed ({where}) but cl is not on PATH: "
                                  "let the lab load its environment (lab.host.msvc.load_msvc_environment(), which "
                                  "`python -m lab run` calls unless LAB_NO_MSVC=1) or run from the "
                                  "'x64 Native Tools Command Prompt for VS'")
                folder = os.path.dirname(where)
                return Reason(Code.COMPILER_NOT_ON_PATH,
                              f"C++ compiler installed but not on PATH ({where}): add {folder} to PATH "
                              f"(export PATH={folder}:$PATH) or set CXX={where}")
            tried = ", ".join(cxx.search) or "nothing"
            cxx_bad = f"CXX={cxx.cxx_env} is not a working compiler; " if cxx.cxx_env else ""
            if windows:
                return Reason(Code.NO_CXX_COMPILER,
                              f"no C++ compiler: {cxx_bad}Inductor tried {tried} and no Visual Studio with the C++ "
                              "tools was found: install the Visual Studio 2022 Build Tools with the "
                              "'Desktop development with C++' workload")
            if cxx.others:
                return Reason(Code.NO_CXX_COMPILER,
                              f"no C++ compiler that Inductor would use: it tried {tried}, which is not on PATH; "
                              f"{cxx.others[0]} is installed: set CXX={cxx.others[0]} to use it")
            return Reason(Code.NO_CXX_COMPILER,
                          f"no C++ compiler: {cxx_bad}Inductor tried {tried} and none is installed in the usual "
                          "places: install g++ (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; "
                          "macOS: xcode-select --install) or set CXX to a compiler's full path")
        if cxx.python_h is None:
            return Reason(Code.NO_PYTHON_HEADERS,
                          f"C++ compiler {cxx.compiler} found but Python.h is missing from {cxx.python_include}; "
                          "Inductor's C++ code fails with 'Python.h: No such file or directory': install the "
                          "Python development headers for this interpreter (Debian/Ubuntu: apt-get install "
                          "python3-dev; Fedora: dnf install python3-devel)")
        if cxx.precompile_headers and cxx.openssl is None and not windows:
            return Reason(Code.NO_OPENSSL,
                          f"C++ compiler {cxx.compiler} and Python.h found, but Inductor hashes its precompiled "
                          "headers with the `openssl` command, which is not on PATH "
                          "(torch._inductor.config.cpp_cache_precompile_headers): install openssl "
                          "(Debian/Ubuntu: apt-get install openssl) or set TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0")
        return None

    def cache_reason(self) -> Reason | None:
        """Why no Inductor compile can work here because of its cache directory, or None."""
        if self.inductor_cache_problem is None:
            return None
        return Reason(Code.INDUCTOR_CACHE_UNWRITABLE,
                      f"Inductor's cache directory {self.inductor_cache_dir} cannot be written "
                      f"({self.inductor_cache_problem}) and every compile writes there: point TORCHINDUCTOR_CACHE_DIR "
                      f"at a writable directory (e.g. export TORCHINDUCTOR_CACHE_DIR=$HOME/.cache/torchinductor), or "
                      f"unset it to use torch's default")

    def triton_reason(self) -> Reason | None:
        t = self.triton
        if t.importable and t.cc_broken:
            return Reason(Code.COMPILER_BROKEN, f"Triton builds its launcher with $CC, and CC={t.cc_env} "
                                                f"{t.cc_broken}: point CC at a working C compiler, or unset it "
                                                "(Triton then uses gcc or clang from PATH)")
        if t.importable:
            return None
        want = f" ({t.torch_requires})" if t.torch_requires else ""
        if t.installed_version:
            return Reason(Code.NO_TRITON, f"Triton {t.installed_version} is installed but does not import "
                                          f"({t.why_not}): reinstall the triton that this torch build requires{want}")
        return Reason(Code.NO_TRITON, f"Triton not importable ({t.why_not}): install the triton package that "
                                      f"matches this torch build{want} to compile for CUDA")

    def cuda_reason(self) -> Reason | None:
        if self.cuda.available:
            return None
        c = self.cuda  # a driver too old for the build's CUDA is said as such, naming both versions
        return driver_reason(c.torch_cuda, c.driver_version, c.driver_cuda, f"torch's CUDA build ({c.torch_cuda})") or \
            Reason(Code.NO_CUDA, f"no CUDA device ({c.why_not}): run on a host with an NVIDIA GPU, a CUDA build of "
                                 "torch and the driver (in Docker: --gpus all)")

    def reason_for(self, need: str, device: str) -> Reason | None:
        """The reason a requirement is not met on this host for a run on `device`, or None."""
        reasons: dict[str, Callable[[], Reason | None]] = {
            "cuda": self.cuda_reason, "cxx": self.cxx_reason, "triton": self.triton_reason, "host": lambda: None,
            "inductor": lambda: self.cache_reason() or (self.triton_reason() if device == "cuda" else self.cxx_reason())}
        if need not in reasons:
            raise ValueError(f"unknown requirement {need!r}")
        return reasons[need]()


# ---------------------------------------------------------------------------- what the probe looks at

def _first_line(cmd: list[str]) -> str | None:
    """First line a command prints, None when it cannot run or fails (Inductor's test: `CXX --version`)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    if out.returncode != 0 and not lines:
        return None
    return lines[0] if lines else ""


@dataclass(frozen=True)
class HostView:
    """The parts of the host the probe reads; `HostView.current()` is this process, tests build their own."""

    path: str  # the PATH searched for compilers
    environ: Mapping[str, str]
    root: str = "/"  # filesystem root for the off-PATH locations
    platform: str = sys.platform
    python_include: str = ""
    search: tuple[str, ...] = ()  # compiler names Inductor tries, in order
    run: Callable[[list[str]], str | None] = _first_line
    real: bool = False  # this process's own environment (then Inductor itself is asked too)
    try_program: Callable[[str, str], str | None] = cxxcheck.compile_and_run  # (compiler, "c++"/"c") -> error

    @classmethod
    def current(cls) -> "HostView":
        return cls(path=os.environ.get("PATH", ""), environ=dict(os.environ), platform=sys.platform,
                   python_include=sysconfig.get_paths().get("include", ""), search=_inductor_search(), real=True)

    @classmethod
    def make(cls, path: str, environ: Mapping[str, str] | None = None, root: str = "/", platform: str = "linux",
             python_include: str = "", run: Callable[[list[str]], str | None] = _first_line,
             try_program: Callable[[str, str], str | None] = cxxcheck.compile_and_run) -> "HostView":
        """A view for tests: the search is derived from `environ` the way Inductor's config derives it."""
        env = dict(environ or {})
        default = {"win32": "cl", "darwin": "clang++"}.get(platform, "g++")
        return cls(path=path, environ=env, root=root, platform=platform, python_include=python_include,
                   search=(env.get("CXX", default),), run=run, try_program=try_program)


def _inductor_search() -> tuple[str, ...]:
    """The names Inductor will try, read from the installed torch's config (None entries: conda download)."""
    if sys.platform == "win32":
        return (os.environ.get("CXX", "cl"),)
    from torch._inductor import config as inductor_config

    cxx = inductor_config.cpp.cxx
    entries = cxx if isinstance(cxx, (list, tuple)) else (cxx,)
    return tuple(str(e) for e in entries if e)


def _under_root(view: HostView, path: str) -> str:
    return path if view.root in ("", "/") else os.path.join(view.root, path.lstrip("/\\"))


def resolve_compiler(name: str, view: HostView) -> str | None:
    """Where `name` resolves the way Inductor's subprocess call would resolve it, or None."""
    if os.sep in name or (os.altsep and os.altsep in name):
        cand = _under_root(view, name)
        return cand if os.path.isfile(cand) and os.access(cand, os.X_OK) else None
    return shutil.which(name, path=view.path)


def find_off_path_compilers(path_env: str | None = None, root: str = "/", cxx_env: str | None = None) -> list[str]:
    """Executable C++ compilers on disk whose folder is not on PATH (plus $CXX when it is a path)."""
    path_value = path_env if path_env is not None else os.environ.get("PATH", "")
    path_dirs = {os.path.realpath(p) for p in path_value.split(os.pathsep) if p}
    candidates = [cxx_env] if cxx_env and os.sep in cxx_env else []
    for pattern in OFF_PATH_GLOBS:
        candidates.extend(sorted(glob.glob(os.path.join(root, pattern))))
    return [cand for cand in dict.fromkeys(candidates) if os.path.isfile(cand) and os.access(cand, os.X_OK)
            and os.path.realpath(os.path.dirname(cand)) not in path_dirs]


def _windows_off_path(view: HostView) -> tuple[list[str], dict[str, Any] | None]:
    """cl.exe inside Visual Studio installs found by vswhere (not on PATH by definition here)."""
    from lab.host import msvc

    if not view.real:
        return [], None
    _, installs = msvc.find_installs(msvc._subprocess_runner, os.path.isfile, os.environ)  # pragma: no cover
    found = [cl for inst in installs  # pragma: no cover
             for cl in sorted(glob.glob(os.path.join(inst.path, "VC", "Tools", "MSVC", "*", "bin", "Hostx64", "x64",
                                                     "cl.exe")))]
    return found, msvc.describe()  # pragma: no cover


def probe_cxx(view: HostView) -> CxxInfo:
    """The compiler Inductor would use under `view`, compilers off PATH, and the Python headers."""
    compiler = path = version = broken = None
    unusable: list[str] = []
    for name in view.search:
        where = resolve_compiler(name, view)
        if where is None:
            continue
        line = view.run([where, "--version"] if view.platform != "win32" else [where])
        if line is None:
            unusable.append(where)
            continue
        compiler, path, version = name, where, line or None
        break
    if path is not None and view.platform != "win32":  # cl takes other flags; MSVC is probed by lab.host.msvc
        broken = view.try_program(path, "c++")
    msvc_info = None
    if view.platform == "win32":
        off_path, msvc_info = _windows_off_path(view)
    else:
        cxx_env = view.environ.get("CXX")
        off_path = find_off_path_compilers(view.path, view.root, _under_root(view, cxx_env) if cxx_env else None)
    python_h = os.path.join(view.python_include, "Python.h") if view.python_include else ""
    agrees = _ask_inductor(compiler) if view.real and view.platform != "win32" else None
    try:
        from torch._inductor import config as inductor_config

        precompile = bool(getattr(inductor_config, "cpp_cache_precompile_headers", False))
    except ImportError:
        precompile = None
    return CxxInfo(
        precompile_headers=precompile, openssl=shutil.which("openssl", path=view.path),
        inductor_setting=repr(view.search), compiler=compiler, path=path, version=version, off_path=off_path,
        python_h=python_h if python_h and Path(python_h).is_file() else None, python_include=view.python_include,
        msvc=msvc_info, search=list(view.search), cxx_env=view.environ.get("CXX"), inductor_agrees=agrees,
        broken=broken, unusable=unusable, others=cxxcheck.others(view.path, off_path, path),
    )


def _ask_inductor(expected: str | None) -> bool | None:
    """Whether Inductor's own search finds the same compiler (None if it cannot be asked)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:
        return None
    try:
        got: str | None = get_cpp_compiler()
    except Exception:  # InvalidCxxCompiler: Inductor found none
        got = None
    return got == expected


def _probe_cuda() -> CudaInfo:
    import torch

    driver: dict[str, Any] = {"driver_version": driver_version(), "driver_cuda": driver_cuda_version(),
              "min_driver": min_driver(torch.version.cuda)}
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "torch.cuda.is_available() is False"
        return CudaInfo(False, torch_cuda=torch.version.cuda, why_not=why, **driver)
    idx = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    return CudaInfo(True, torch.cuda.device_count(), torch.cuda.get_device_name(idx), f"{major}.{minor}",
                    torch.version.cuda, **driver)


def _torch_triton_requirement() -> str | None:
    import importlib.metadata as metadata

    try:
        reqs = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    names = (r.split(";")[0].strip() for r in reqs)
    return next((n for n in names if n.lower().startswith(("triton", "pytorch-triton"))), None)


def probe_triton(importer: Callable[[], Any] | None = None) -> TritonInfo:
    """Import Triton; when it fails, say why, whether a distribution is installed, and what torch asks for."""
    installed = next(filter(None, map(version_of, ("triton", "pytorch-triton", "triton-windows"))), None)
    try:
        module = importlib.import_module("triton") if importer is None else importer()
    except Exception as exc:  # ImportError, or a broken install raising something else
        return TritonInfo(False, why_not=f"{type(exc).__name__}: {exc}".splitlines()[0], installed_version=installed,
                          torch_requires=_torch_triton_requirement())
    return TritonInfo(True, version=getattr(module, "__version__", "unknown"), installed_version=installed,
                      torch_requires=_torch_triton_requirement())


def _maybe_load_msvc(view: HostView) -> None:
    """On Windows with no `cl` on PATH, import Visual Studio's environment once (LAB_NO_MSVC=1 turns it off)."""
    if view.platform != "win32" or not view.real or os.environ.get("LAB_NO_MSVC") == "1":
        return
    if any(resolve_compiler(name, view) for name in view.search):  # pragma: no cover - Windows only
        return
    from lab.host import msvc  # pragma: no cover

    msvc.load_msvc_environment()  # pragma: no cover


def probe(view: HostView | None = None) -> Toolchain:
    """Probe this process (default) or the given view. On Windows this may load the MSVC environment first."""
    import platform

    if view is None:
        view = HostView.current()
        if view.platform == "win32":  # pragma: no cover - Windows only
            _maybe_load_msvc(view)
            view = HostView.current()
    triton = probe_triton()
    triton.cc_env = view.environ.get("CC") or None
    if triton.cc_env and view.platform != "win32":
        where = resolve_compiler(triton.cc_env, view)
        triton.cc_broken = "names no compiler (no such file, or not on PATH)" if where is None else \
            view.try_program(where, "c")
    from lab.host.cache_dir import cache_dir_problem, configured_cache_dir

    cache = configured_cache_dir(view.environ, view.real)
    return Toolchain(platform=platform.platform(), cuda=_probe_cuda(), triton=triton, cxx=probe_cxx(view),
                     os_family=view.platform, inductor_cache_dir=cache,
                     inductor_cache_problem=cache_dir_problem(cache) if cache else None)
