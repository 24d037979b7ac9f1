"""The lab's environment on a GPU host without network: a virtualenv that sees the host interpreter's packages.

A GPU host's `python3` is often itself a virtualenv or a conda environment (the project's H200: `sys.prefix`
/opt/torch/.venv, `sys.base_prefix` /usr; NGC containers, conda and cloud images are alike). There `python3 -m
venv --system-site-packages` makes a venv on the *base* Python, which does not see torch, Triton or anything the
host installed, and the wheelhouse, built to leave out what the host has (`--have`), then lacks them. Installing
into the host interpreter itself works but changes the environment that is being measured, for good.

So the lab makes an overlay: a virtualenv on the host interpreter's base Python, without pip, whose site-packages
holds the wheelhouse (installed there by the host's own pip with `--target --no-deps`: any pip does that, and
requirements.txt is the complete list the wheelhouse resolved against the host's versions), and a `.pth` file that
adds every site-packages folder the host interpreter sees (its own .pth files processed, as `site.addsitedir` does),
after the overlay's own. What the wheelhouse carries shadows the host's copy inside the overlay only; the host
environment is not touched, and `rm -r .venv` undoes everything. It works the same where `python3` is a plain
system Python (the overlay then adds its site folders) and where it is a venv or conda (their site folders).
Standard library only: it runs before the lab's dependencies are there.
"""

from __future__ import annotations

import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lab.host import wheelhouse as W

PTH = "graph_lab_host.pth"


@dataclass(frozen=True)
class Host:
    """The interpreter the overlay extends: its executable, the base Python it was made from, its site folders."""

    executable: str
    base: str
    site_dirs: tuple[str, ...]
    version: str

    @classmethod
    def current(cls) -> Host:
        """This interpreter (the one holding the torch to measure)."""
        base = getattr(sys, "_base_executable", None) or sys.executable
        dirs = [*site.getsitepackages(), *(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))]
        if site.ENABLE_USER_SITE and site.getusersitepackages():
            dirs.append(site.getusersitepackages())
        seen = tuple(d for d in dict.fromkeys(dirs) if Path(d).is_dir())
        return cls(sys.executable, base, seen, f"{sys.version_info.major}.{sys.version_info.minor}")


def overlay_site(venv: Path, version: str) -> Path:
    """The overlay's own site-packages (a POSIX venv's layout)."""
    return venv / "lib" / f"python{version}" / "site-packages"


def pth_text(host: Host) -> str:
    """The .pth that adds the host's site folders after the overlay's (executed by `site` at every start)."""
    dirs = ", ".join(repr(d) for d in host.site_dirs)
    return f"import site; list(map(site.addsitedir, ({dirs},)))\n"  # (one line: `site` executes it as it is)


def make(venv: Path, wheels: Path, host: Host | None = None) -> Path:
    """Make (or remake) the overlay at VENV and install WHEELS into it; its interpreter. ValueError: one line."""
    host = host or Host.current()
    requirements = wheels / W.REQUIREMENTS_FILE
    if not requirements.is_file():
        raise ValueError(f"--wheels {wheels}: no {W.REQUIREMENTS_FILE} there (build the wheelhouse with `python3 -m "
                         "lab wheelhouse DIR ...` on a connected host and copy DIR here)")
    if sys.platform == "win32":
        raise ValueError("lab venv: the overlay is made for POSIX hosts; on Windows use a virtualenv and pip")
    _run([host.base, "-m", "venv", "--clear", "--without-pip", str(venv)], f"making the virtualenv {venv}")
    target = overlay_site(venv, host.version)
    if not target.is_dir():
        raise ValueError(f"{venv}: the virtualenv has no {target.relative_to(venv)} (made by {host.base}, which is "
                         f"not Python {host.version}?)")
    (target / PTH).write_text(pth_text(host))
    _run([host.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
          "--find-links", str(wheels), "--require-hashes", "--no-deps", "--target", str(target),
          "-r", str(requirements)], f"installing the wheels of {wheels} into {venv}")
    python = venv / "bin" / "python"
    missing = _missing(python, [*W.lab_requirements(Path(__file__).resolve().parents[2] / "pyproject.toml"),
                                "torch"])
    if missing:
        raise ValueError(f"{venv}: the lab's interpreter there lacks {', '.join(missing)}: the wheelhouse was built "
                         f"for another host or another --have (build it again with --have the output of "
                         f"`{host.executable} -m pip freeze`)")
    return python


CHECK = """
import sys
from importlib import metadata
missing = []
for name in sys.argv[1:]:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(name)
print(" ".join(missing))
"""


def _missing(python: Path, requirements: list[str]) -> list[str]:
    """The distributions among REQUIREMENTS that the overlay's interpreter cannot see."""
    names = [W.requirement_name(r) for r in requirements]
    proc = _run([str(python), "-c", CHECK, *names], f"checking the lab's dependencies with {python}")
    return proc.stdout.split()


def _run(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"{what}: {exc}") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or ["failed"]
        raise ValueError(f"{what}: {' '.join(errors[-1].split())}")
    return proc
