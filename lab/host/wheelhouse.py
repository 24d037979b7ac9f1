"""The offline wheelhouse: the wheels of the lab's dependencies for a GPU host without network, with hashes.

On a connected host, pip resolves the lab's dependencies (pyproject's [project] dependencies and nox,
which runs `nox -s gpu_lab --no-venv`) for a target Python and platform, wheels only
(`pip install --dry-run --report` with `--only-binary=:all: --python-version --platform --implementation cp`).
torch, Triton and the CUDA libraries (nvidia-*) are never part of it: the GPU host's torch is the one
measured. They are refused before anything is downloaded (a constraint no release of torch or triton
meets, then a check of the resolved set), then `pip download --no-deps` fetches exactly the resolved
wheels and `requirements.txt` pins each with its `--hash=sha256:`. On the GPU host, pip installs them
with `--no-index --find-links DIR --require-hashes -r DIR/requirements.txt` (README.md, "A GPU host
without network"). Standard library only: it runs with any python3 that has pip.

`have` (the GPU host's `pip freeze`, `--have FILE`) carries only what the host lacks: the dependencies
it has at a version the lab accepts are pinned to that version for a second resolution (so the wheels
carried fit the host's versions), and left out; requirements.txt lists what was left out and why,
and what the host has at a version the lab does not accept (that wheel is carried). Whether a host's
version is accepted is first checked against the requirements on it in the resolution without the
host (packaging's specifiers, pip's own copy where packaging is not installed); pip's resolution with
the pins is the final word, and where it fails the wheelhouse holds everything and says why.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

# What the GPU host brings and the wheelhouse never holds (PEP 503 normalised names; nvidia-* by prefix).
LEFT_TO_HOST = ("torch", "triton", "pytorch-triton")
LEFT_TO_HOST_PREFIXES = ("nvidia-",)
# Besides [project] dependencies: what `python3 -m nox -s gpu_lab --no-venv` needs (taken from the dev extra's pin).
RUNNERS = ("nox",)
REQUIREMENTS_FILE = "requirements.txt"
_SCRATCH = (".wheelhouse-report.json", ".wheelhouse-constraints.txt", ".wheelhouse-dry-run")


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def left_to_host(name: str) -> bool:
    """torch, Triton and the CUDA libraries: the GPU host's own, never downloaded."""
    n = normalize(name)
    return n in LEFT_TO_HOST or n.startswith(LEFT_TO_HOST_PREFIXES)


def requirement_name(spec: str) -> str:
    """The distribution a requirement names ("pydantic>=2.7,<3" -> "pydantic")."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not match:
        raise ValueError(f"not a requirement: {spec!r}")
    return match.group(1)


def lab_requirements(pyproject: Path) -> list[str]:
    """pyproject's [project] dependencies without torch & co, plus nox as the dev extra pins it."""
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{pyproject}: cannot read the lab's dependencies ({exc})") from None
    project = data.get("project", {})
    wanted = [spec for spec in project.get("dependencies", []) if not left_to_host(requirement_name(spec))]
    extras = [spec for group in project.get("optional-dependencies", {}).values() for spec in group]
    for runner in RUNNERS:
        pinned = [spec for spec in extras if normalize(requirement_name(spec)) == runner]
        wanted.append(pinned[0] if pinned else runner)
    return wanted


def platform_tags(tag: str) -> tuple[str, ...]:
    """The platform tags pip must be given for a target (pip matches them exactly): a manylinux tag expands to
    itself and every older manylinux of the same architecture (manylinux_2_28 down to manylinux_2_5 and the
    legacy manylinux2014/2010/1 names); any other tag (macosx, win, musllinux) is passed as it is."""
    legacy = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
    match = (re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
             or re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_(\w+)", tag))
    if match is None:
        if not re.fullmatch(r"[a-z0-9_]+", tag):
            raise ValueError(f"--platform {tag!r}: not a wheel platform tag (e.g. manylinux_2_28_x86_64)")
        return (tag,)
    if len(match.groups()) == 3:
        major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
    else:
        (major, minor), arch = legacy[match.group(1)], match.group(2)
    if major != 2:
        return (tag,)
    tags: list[str] = []
    for m in range(minor, 4, -1):
        tags.append(f"manylinux_2_{m}_{arch}")
        tags.extend(f"{name}_{arch}" for name, version in legacy.items() if version == (2, m))
    return tuple(tags)


def host_platform() -> str:
    """This host's most specific manylinux tag (glibc Linux), for a wheelhouse built for the host itself."""
    libc, version = platform.libc_ver()
    machine = platform.machine()
    if sys.platform != "linux" or libc != "glibc" or not re.fullmatch(r"\d+\.\d+.*", version):
        raise ValueError(f"--platform: this host ({sys.platform}, {libc or 'no glibc'}) has no manylinux tag; "
                         "give the GPU host's, e.g. --platform manylinux_2_28_x86_64")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{int(minor)}_{machine}"


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels are for: CPython X.Y on a platform tag."""

    python: str
    platform: str

    def __post_init__(self) -> None:
        if not re.fullmatch(r"3\.\d+", self.python):
            raise ValueError(f"--python {self.python!r}: give the GPU host's Python as X.Y, e.g. --python 3.12")
        platform_tags(self.platform)

    def describe(self) -> str:
        return f"CPython {self.python} on {self.platform}"

    def pip_args(self) -> list[str]:
        return ["--only-binary=:all:", "--implementation", "cp", "--python-version", self.python,
                *(arg for tag in platform_tags(self.platform) for arg in ("--platform", tag))]


@dataclass(frozen=True)
class Wheel:
    """One wheel of the wheelhouse: the distribution, its version, the file, its sha256."""

    name: str
    version: str
    file: str
    sha256: str

    def requirement(self) -> str:
        return f"{normalize(self.name)}=={self.version} --hash=sha256:{self.sha256}"


def pip_failure(output: str, target: Target) -> str:
    """pip's refusal as one line naming the package it could not get."""
    for line in output.splitlines():
        found = re.search(r"No matching distribution found for (\S+)", line)
        if found:
            return (f"pip found no wheel of {found.group(1)} for {target.describe()} (the wheelhouse takes wheels "
                    "only; check --python and --platform against the GPU host's `python3 -m pip debug --verbose`)")
    for line in output.splitlines():
        pulled = re.search(r"(\S+) (\S+) depends on (\S+)", line)
        if pulled and left_to_host(requirement_name(pulled.group(3))):
            return (f"{pulled.group(1)} {pulled.group(2)} depends on {requirement_name(pulled.group(3))}, which the "
                    "wheelhouse leaves to the GPU host (its torch, Triton and CUDA libraries are the ones measured)")
    errors = [line.removeprefix("ERROR:").strip() for line in output.splitlines() if line.startswith("ERROR:")]
    last = errors[-1] if errors else (output.strip().splitlines() or ["pip failed"])[-1]
    return f"pip could not build the wheelhouse for {target.describe()}: {' '.join(last.split())}"


def _pip(pip: Sequence[str], args: list[str], target: Target) -> None:
    try:
        proc = subprocess.run([*pip, *args], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ValueError(f"cannot run pip ({' '.join(pip)}): {exc.strerror or exc}") from None
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if "No module named pip" in output:
            raise ValueError(f"{pip[0]} has no pip: install it (python3 -m ensurepip) or run with an interpreter that has")
        raise ValueError(pip_failure(output, target))


# The oldest pip whose resolution for another platform the lab relies on. Older ones (23.x, what Debian 12 and
# many fresh machines have) refuse --platform without --target, and, given the host's versions as constraints,
# check Requires-Python against the interpreter that runs them instead of the target's (seen with pip 23.2.1:
# "contourpy requires a different Python: 3.11.7 not in '>=3.12'"), so --have left nothing out.
MIN_PIP = (25, 0)
PIP_VENV = ".wheelhouse-pip"


def pip_version(pip: Sequence[str]) -> tuple[int, ...]:
    """The version of the pip that `pip` runs, as numbers ((0,) when it cannot say)."""
    try:
        proc = subprocess.run([*pip, "--version"], capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return (0,)
    found = re.match(r"pip (\d+(?:\.\d+)*)", proc.stdout.strip())
    return tuple(int(x) for x in found.group(1).split(".")) if found else (0,)


def current_pip(out: Path, python: str = sys.executable, say: Any = print) -> tuple[list[str], Path | None]:
    """The pip to build with: this interpreter's when it is MIN_PIP or newer; else a current pip in a throw-away
    virtualenv made in OUT (returned second, for the caller to remove). One line (ValueError) when neither works."""
    pip = [python, "-m", "pip"]
    have = pip_version(pip)
    if have >= MIN_PIP:
        return pip, None
    need = ".".join(map(str, MIN_PIP))
    shown = ".".join(map(str, have)) if have != (0,) else "none"
    venv = out / PIP_VENV
    say(f"this interpreter's pip ({shown}) is older than {need}, which resolving for another platform needs: "
        f"installing a current pip into a throw-away virtualenv ({venv}, removed afterwards)")
    fix = (f"run the command with an interpreter whose pip is {need} or newer (`python3 -m pip install --user "
           f"--upgrade pip`, or from any virtualenv)")
    try:
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], capture_output=True, text=True, check=True,
                       timeout=300)
        vpy = str(venv / "bin" / "python")
        subprocess.run([vpy, "-m", "pip", "install", "-q", "--upgrade", f"pip>={need}"], capture_output=True,
                       text=True, check=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        detail = getattr(exc, "stderr", None) or str(exc)
        last = (detail.strip().splitlines() or ["failed"])[-1]
        raise ValueError(f"this interpreter's pip ({shown}) is older than {need}, and a throw-away virtualenv with "
                         f"a current one could not be made ({' '.join(last.split())}): {fix}") from None
    return [vpy, "-m", "pip"], venv


def resolve(requirements: Sequence[str], target: Target, out: Path, pip: Sequence[str],
            pins: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The wheels pip would install for the target (its --report's `install` list), nothing downloaded but metadata;
    torch and triton cannot be chosen (a constraint no release meets), anything else left to the host is refused.
    `pins`: {name: version} the resolution must use (the host's, `--have`)."""
    report, constraints, scratch = (out / name for name in _SCRATCH)
    constraints.write_text("".join(f"{name}<0\n" for name in LEFT_TO_HOST)
                           + "".join(f"{name}=={version}\n" for name, version in sorted((pins or {}).items())))
    try:
        # --target: pips before 23.3 refuse --platform & co without it; with --dry-run nothing is written there
        _pip(pip, ["install", "--dry-run", "--ignore-installed", "--target", str(scratch), "--report", str(report),
                   "--constraint", str(constraints), *target.pip_args(), *requirements], target)
        chosen: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    finally:
        report.unlink(missing_ok=True)
        constraints.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    refused = sorted({item["metadata"]["name"] for item in chosen if left_to_host(item["metadata"]["name"])})
    if refused:
        raise ValueError(f"the lab's dependencies pull {', '.join(refused)}, which the wheelhouse leaves to the GPU "
                         "host (its torch, Triton and CUDA libraries are the ones measured)")
    return chosen


def sha256(path: Path) -> str:
    """A file's sha256 in hex, read in blocks (the wheels here, and the wheelhouse files a lock hashes)."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def download(chosen: Sequence[dict[str, Any]], target: Target, out: Path, pip: Sequence[str]) -> list[Wheel]:
    """`pip download --no-deps` of exactly the resolved wheels into OUT; each file's sha256 checked against the
    index's where it gave one."""
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in chosen]
    _pip(pip, ["download", "--no-deps", "--quiet", "--dest", str(out), *target.pip_args(), *pins], target)
    wheels = []
    for item in chosen:
        info = item["download_info"]
        file = unquote(Path(urlsplit(info["url"]).path).name)
        path = out / file
        if not path.is_file():
            raise ValueError(f"{path}: pip reported downloading it, but it is not there")
        digest = sha256(path)
        expected = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if expected and expected != digest:
            raise ValueError(f"{path}: sha256 {digest} differs from the index's {expected}: remove it and build again")
        wheels.append(Wheel(item["metadata"]["name"], item["metadata"]["version"], file, digest))
    return sorted(wheels, key=lambda w: normalize(w.name))


# ---------------------------------------------------------------------------- --have: what the GPU host has

def read_have(path: Path) -> dict[str, str | None]:
    """The GPU host's packages from `pip freeze` / `pip list --format=freeze` output: {normalised name: version}
    (None: installed from a URL or editable, version unknown). ValueError (one line naming the file) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"--have {path}: cannot read it ({why})") from None
    have: dict[str, str | None] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        pinned = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)", line)
        other = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*@\s*\S+", line)
        editable = re.fullmatch(r"-e\s+\S*?#egg=([A-Za-z0-9][A-Za-z0-9._-]*)\S*", line)
        if pinned:
            have[normalize(pinned.group(1))] = pinned.group(2)
        elif other or editable:
            have[normalize((other or editable).group(1))] = None  # type: ignore[union-attr]
        elif line.startswith("-e "):
            continue  # an editable checkout without a name: nothing the wheelhouse could leave out
        else:
            raise ValueError(f"--have {path}: line {n} is not `name==version` as `pip freeze` writes it: {raw.strip()!r}"
                             " (give the output of `python3 -m pip freeze` on the GPU host)")
    if not have:
        raise ValueError(f"--have {path}: lists no package (give the output of `python3 -m pip freeze` on the GPU host)")
    return have


def _packaging() -> Any:
    """packaging's requirements module (Requirement, and through it specifiers and markers), else pip's own copy."""
    try:
        from packaging import requirements
    except ImportError:
        from pip._vendor.packaging import requirements  # type: ignore[no-redef]
    return requirements


def marker_environment(target: Target) -> dict[str, str]:
    """The target's PEP 508 marker values (what decides whether a Requires-Dist line applies there)."""
    linux = target.platform.startswith(("manylinux", "musllinux", "linux"))
    arch = re.sub(r"^(manylinux\d*|manylinux_\d+_\d+|musllinux_\d+_\d+|linux)_", "", target.platform)
    env = {"python_version": target.python, "python_full_version": f"{target.python}.0",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    if linux:
        env |= {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": arch, "os_name": "posix"}
    return env


def demands(requirements: Sequence[str], chosen: Sequence[dict[str, Any]], target: Target) -> dict[str, list[tuple[str, Any]]]:
    """Every requirement on each distribution of a resolution: {name: [(who asks, its SpecifierSet)]} (the lab's own
    requirements, and each chosen wheel's Requires-Dist lines that apply on the target)."""
    Requirement = _packaging().Requirement
    env = marker_environment(target)
    asks = [("the lab", spec) for spec in requirements]
    for item in chosen:
        meta = item["metadata"]
        asks += [(f"{meta['name']} {meta['version']}", spec) for spec in meta.get("requires_dist") or []]
    out: dict[str, list[tuple[str, Any]]] = {}
    for who, spec in asks:
        req = Requirement(spec)
        try:
            applies = req.marker is None or req.marker.evaluate(env)
        except Exception:  # a marker this target cannot decide: counted, so a host's version is never taken blindly
            applies = True
        if applies:
            out.setdefault(normalize(req.name), []).append((who, req.specifier))
    return out


@dataclass
class HostFit:
    """What the GPU host has (--have): the distributions left out (name -> version), those it has that are carried
    all the same (name -> why), and why nothing was left out after all, for requirements.txt."""

    left_out: dict[str, str] = field(default_factory=dict)
    carried: dict[str, str] = field(default_factory=dict)
    note: str = ""


def host_fit(have: dict[str, str | None], requirements: Sequence[str], chosen: Sequence[dict[str, Any]],
             target: Target) -> tuple[dict[str, str], HostFit]:
    """The host versions every requirement on them in `chosen` accepts (the pins of the second resolution), and a
    HostFit naming the others."""
    asked = demands(requirements, chosen, target)
    fit, pins = HostFit(), {}
    for item in chosen:
        name = normalize(item["metadata"]["name"])
        version = have.get(name, "")
        if version == "":
            continue
        if version is None:
            fit.carried[name] = "the host's is installed from a URL or editable: its version is not known"
            continue
        try:
            bad = [(who, str(spec)) for who, spec in asked.get(name, [])
                   if not spec.contains(version, prereleases=True)]
        except ValueError:  # packaging's InvalidVersion: not a version it can compare
            fit.carried[name] = f"the host's version {version!r} is not one pip can compare"
            continue
        if bad:
            fit.carried[name] = f"the host has {version}; {bad[0][0]} asks for {name}{bad[0][1]}"
        else:
            pins[name] = version
    return pins, fit


def install_command(out: Path) -> str:
    """pip's plain install of the wheelhouse into an interpreter that sees the host's packages (`lab venv` installs
    the same list into its overlay with --target --no-deps instead: lab.host.overlay)."""
    return f"python -m pip install --no-index --find-links {out} --require-hashes -r {out / REQUIREMENTS_FILE}"


def venv_command(out: Path) -> str:
    """The lab's interpreter on the GPU host from the wheelhouse (lab.host.overlay)."""
    return f"python3 -m lab venv .venv --wheels {out}"


def write_requirements(out: Path, wheels: Sequence[Wheel], target: Target, fit: HostFit | None = None,
                       have: Path | None = None) -> Path:
    """OUT/requirements.txt: one `name==version --hash=sha256:...` line per wheel; with `fit` (--have), comments
    saying what the host has and was left out, and what it has at a version the lab does not take."""
    path = out / REQUIREMENTS_FILE
    header = (f"# graph-lab's dependencies for {target.describe()}, wheels in this folder; torch, triton and nvidia-*\n"
              "# are the GPU host's own. On the GPU host, from a checkout, with the python3 that holds torch\n"
              f"# (README.md, 'A GPU host without network'):\n#   {venv_command(Path('DIR'))}\n")
    if fit is not None:
        header += f"# --have {have}: what the GPU host has\n"
        if fit.note:
            header += f"#   nothing left out: {fit.note}\n"
        header += "".join(f"#   left out: {name}=={version} is on the host, a version the lab's dependencies accept\n"
                          for name, version in sorted(fit.left_out.items()))
        header += "".join(f"#   carried: {name}: {why}\n" for name, why in sorted(fit.carried.items()))
    path.write_text(header + "".join(w.requirement() + "\n" for w in wheels))
    return path


def build(out: Path, requirements: Sequence[str], target: Target,
          pip: Sequence[str] | None = None, have: dict[str, str | None] | None = None,
          have_file: Path | None = None, say: Any = print) -> list[Wheel]:
    """Resolve, download and pin the wheels of REQUIREMENTS for TARGET into OUT; with `have` (read_have), only
    those the host lacks or has at a version the lab does not take. `pip`: the pip to run (default: this
    interpreter's, or a current one in a throw-away virtualenv when it is older than MIN_PIP)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{out}: cannot make the wheelhouse folder ({exc.strerror or exc})") from None
    venv = None
    if pip is None:
        pip, venv = current_pip(out, say=say)
    try:
        return _build(out, requirements, target, pip, have, have_file)
    finally:
        if venv is not None:
            shutil.rmtree(venv, ignore_errors=True)


def _build(out: Path, requirements: Sequence[str], target: Target, pip: Sequence[str],
           have: dict[str, str | None] | None, have_file: Path | None) -> list[Wheel]:
    chosen = resolve(requirements, target, out, pip)
    fit = None
    if have is not None:
        pins, fit = host_fit(have, requirements, chosen, target)
        if pins:
            try:
                chosen = resolve(requirements, target, out, pip, pins)
            except ValueError as exc:  # the host's versions together do not resolve: carry everything, say why
                fit.note = f"pip could not resolve the lab's dependencies with the host's versions ({exc})"
            else:
                fit.left_out = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in chosen
                                if pins.get(normalize(i["metadata"]["name"])) == i["metadata"]["version"]}
                chosen = [i for i in chosen if normalize(i["metadata"]["name"]) not in fit.left_out]
    wheels = download(chosen, target, out, pip) if chosen else []
    write_requirements(out, wheels, target, fit, have_file)
    return wheels
