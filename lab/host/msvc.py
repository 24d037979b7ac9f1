"""Bring Visual Studio's C++ compiler (`cl`) into this process on Windows.

Inductor's C++ backend on Windows calls `cl` (or `$CXX`) and expects the environment of a
"Developer Command Prompt": PATH, INCLUDE, LIB and LIBPATH set by `vcvars64.bat`. A plain shell
has none of it, and Inductor then says it cannot find a compiler although Visual Studio is
installed; chapter 000's first draft recorded exactly that accident as a fact. So the lab finds
Visual Studio through `vswhere.exe`, runs `cmd /c "vcvars64.bat && set"`, and copies the
variables that `set` prints into `os.environ`.

Everything that touches the system goes through an injectable `runner` and `exists`, so the
parsing and selection are unit-tested on Linux with recorded `vswhere` and `set` output. On
other platforms `load_msvc_environment()` reports "not applicable" and changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, MutableMapping

# The line printed between vcvars64.bat's banner and `set`'s output: everything after it is the environment.
MARKER = "__LAB_MSVC_ENV__"
VC_COMPONENT = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"


@dataclass
class Completed:
    """What a command runner returns (subprocess.CompletedProcess has these fields)."""

    returncode: int
    stdout: str
    stderr: str = ""


Runner = Callable[[list[str]], Completed]


def _subprocess_runner(cmd: list[str]) -> Completed:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, errors="replace")
    except (OSError, subprocess.SubprocessError) as exc:
        return Completed(returncode=-1, stdout="", stderr=f"{type(exc).__name__}: {exc}")
    return Completed(out.returncode, out.stdout or "", out.stderr or "")


@dataclass
class VsInstall:
    path: str  # installationPath
    name: str  # displayName
    version: str  # installationVersion, e.g. "17.8.34330.188"

    @property
    def vcvars64(self) -> str:
        return win_join(self.path, "VC", "Auxiliary", "Build", "vcvars64.bat")

    def version_key(self) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in self.version.split("."))


@dataclass
class MsvcEnvironment:
    """The outcome of `load_msvc_environment()`; goes into the manifest as a dict."""

    applicable: bool
    loaded: bool = False
    reason: str | None = None  # why not loaded (one sentence, with the fix)
    vswhere: str | None = None
    installs: list[dict[str, str]] = field(default_factory=list)
    chosen: str | None = None  # installation path used
    vcvars: str | None = None
    changed: list[str] = field(default_factory=list)  # names of variables set or changed
    cl: str | None = None  # where cl.exe is after loading

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def win_join(*parts: str) -> str:
    """Join with backslashes whatever the host (so recorded Windows paths are tested on Linux)."""
    return "\\".join(p.rstrip("\\/") for p in parts)


def vswhere_candidates(environ: MutableMapping[str, str] | dict[str, str]) -> list[str]:
    """Where vswhere.exe lives: the Installer folder under Program Files (x86), or the one on PATH."""
    bases = (environ.get("ProgramFiles(x86)"), environ.get("ProgramFiles"), "C:\\Program Files (x86)")
    return list(dict.fromkeys(win_join(b, "Microsoft Visual Studio", "Installer", "vswhere.exe") for b in bases if b))


def parse_vswhere(text: str) -> list[VsInstall]:
    """vswhere's `-format json` output: a JSON list of installations (empty or garbage: none)."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return []
    return [VsInstall(path=str(item["installationPath"]), name=str(item.get("displayName", "")),
                      version=str(item.get("installationVersion", "")))
            for item in (data if isinstance(data, list) else [])
            if isinstance(item, dict) and item.get("installationPath")]


def choose_install(installs: list[VsInstall], exists: Callable[[str], bool]) -> VsInstall | None:
    """The newest installation that has vcvars64.bat (Build Tools without the C++ workload have none)."""
    usable = [i for i in installs if exists(i.vcvars64)]
    return max(usable, key=VsInstall.version_key) if usable else None


def parse_set_output(text: str) -> dict[str, str]:
    """`set` output after MARKER -> {name: value}.

    A value may contain '=' (split at the first one only). cmd's hidden per-drive variables
    ("=C:=C:\\...") start with '=' and are skipped, as are lines without '=' (banners, errors).
    Without the marker the whole text is parsed (for `set` output recorded on its own).
    """
    lines = text.splitlines()
    marker = next((i for i, line in enumerate(lines) if line.strip() == MARKER), None)
    lines = lines if marker is None else lines[marker + 1:]
    env: dict[str, str] = {}
    for line in lines:
        line = line.rstrip("\r")
        if not line or line.startswith("=") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        if name.strip() != name or " " in name:
            continue  # not a variable assignment
        env[name] = value
    return env


def find_installs(runner: Runner, exists: Callable[[str], bool],
                  environ: MutableMapping[str, str] | dict[str, str]) -> tuple[str | None, list[VsInstall]]:
    """(vswhere path or None, installations with the C++ tools)."""
    vswhere = next((c for c in vswhere_candidates(environ) if exists(c)), None)
    if vswhere is None:
        return None, []
    done = runner([vswhere, "-products", "*", "-requires", VC_COMPONENT, "-format", "json", "-utf8"])
    return vswhere, parse_vswhere(done.stdout) if done.returncode == 0 else []


def find_cl(path_value: str) -> str | None:
    """cl.exe on a Windows PATH value (checked with the host's filesystem)."""
    return next((win_join(d, "cl.exe") for d in path_value.split(";")
                 if d and os.path.isfile(os.path.join(d, "cl.exe"))), None)


_LAST: MsvcEnvironment | None = None


def load_msvc_environment(runner: Runner = _subprocess_runner, exists: Callable[[str], bool] = os.path.isfile,
                          environ: MutableMapping[str, str] | None = None,
                          platform: str = sys.platform) -> MsvcEnvironment:
    """Find vcvars64.bat through vswhere, run it, import what it sets into `environ` (os.environ)."""
    global _LAST
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    if platform != "win32":
        result = MsvcEnvironment(applicable=False,
                                 reason=f"not Windows ({platform}): Inductor uses g++ or clang++ here, no MSVC environment")
        _LAST = result
        return result
    vswhere, installs = find_installs(runner, exists, env)
    result = MsvcEnvironment(applicable=True, vswhere=vswhere, installs=[asdict(i) for i in installs])
    if vswhere is None:
        result.reason = ("vswhere.exe not found, so no Visual Studio is installed: install the Visual Studio 2022 "
                         "Build Tools with the 'Desktop development with C++' workload")
    elif not installs:
        result.reason = ("Visual Studio is installed without the C++ tools: add the 'Desktop development with C++' "
                         "workload (component " + VC_COMPONENT + ") in the Visual Studio Installer")
    else:
        chosen = choose_install(installs, exists)
        if chosen is None:
            result.reason = (f"no vcvars64.bat under any Visual Studio install ({', '.join(i.path for i in installs)}): "
                             "repair the installation's C++ workload in the Visual Studio Installer")
        else:
            result.chosen, result.vcvars = chosen.path, chosen.vcvars64
            done = runner(["cmd", "/d", "/s", "/c", f'call "{chosen.vcvars64}" >nul && echo {MARKER} && set'])
            if done.returncode != 0 or MARKER not in done.stdout:
                first = (done.stderr or done.stdout).strip().splitlines()
                result.reason = (f"{chosen.vcvars64} failed (exit status {done.returncode}"
                                 f"{': ' + first[0] if first else ''}): run it by hand in cmd to see why")
            else:
                new = parse_set_output(done.stdout)
                for name, value in new.items():
                    if env.get(name) != value:
                        env[name] = value
                        result.changed.append(name)
                result.loaded = True
                result.cl = find_cl(env.get("PATH", env.get("Path", "")))
    _LAST = result
    return result


def describe() -> dict[str, Any]:
    """For the manifest: the last load's outcome in this process, or a fresh look that changes nothing."""
    if _LAST is not None:
        return _LAST.as_dict()
    if sys.platform != "win32":
        return MsvcEnvironment(applicable=False, reason=f"not Windows ({sys.platform})").as_dict()
    vswhere, installs = find_installs(_subprocess_runner, os.path.isfile, os.environ)  # pragma: no cover
    return MsvcEnvironment(applicable=True, vswhere=vswhere,  # pragma: no cover
                           installs=[asdict(i) for i in installs],
                           cl=find_cl(os.environ.get("PATH", ""))).as_dict()
