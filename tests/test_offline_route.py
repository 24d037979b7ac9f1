"""README.md's route for a GPU host without network, run as the README writes it.

The commands are read out of the README's three blocks ("# 1. on the GPU host", "# 2. on a connected host",
"# 3. on the GPU host"), so the document and this test cannot drift. The "GPU host" is a virtualenv holding CPU
torch, as the project's H200 is a virtualenv holding CUDA torch: there `python3 -m venv --system-site-packages`
would not see torch. The connected host is this machine's system python3 with its own pip (older than the lab's
wheelhouse needs for another platform on a fresh Debian machine), so the throw-away pip is exercised too. Only
the target is this machine's Python and platform instead of the H200's, and the run is one experiment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.host import wheelhouse as W

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## A GPU host without network"


def route_blocks(readme: str) -> dict[int, list[str]]:
    """{step: [command, ...]} from the section's blocks that start `# N. on ...`."""
    section = readme[readme.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    blocks: dict[int, list[str]] = {}
    step = None
    for line in section.splitlines():
        head = re.fullmatch(r" {4}# (\d)\. on .*", line)
        if head:
            step = int(head.group(1))
            blocks[step] = []
        elif step is not None and line.startswith("    ") and line.strip():
            blocks[step].append(line.strip())
        elif not line.strip():
            step = None
    return blocks


def test_the_readme_route_has_three_steps_naming_the_labs_own_commands() -> None:
    blocks = route_blocks((ROOT / "README.md").read_text())
    assert sorted(blocks) == [1, 2, 3] and all(blocks.values())
    assert any("python3 -m lab wheelhouse" in c and "--have host.txt" in c for c in blocks[2])
    assert any(c.startswith("python3 -m lab venv ") for c in blocks[3])
    assert any("nox -s gpu_lab --no-venv" in c for c in blocks[3])


def _without(path: str, prefixes: list[str]) -> str:
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not any(p.startswith(x) for x in prefixes))


def _sh(command: str, cwd: Path, env: dict[str, str], timeout: int = 1200) -> str:
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=timeout)
    assert proc.returncode == 0, (command, (proc.stdout + proc.stderr)[-4000:])
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_offline_route_as_the_readme_writes_it(tmp_path: Path) -> None:
    blocks = route_blocks((ROOT / "README.md").read_text())
    checkout = tmp_path / "checkout"
    for part in ("lab", "report"):
        shutil.copytree(ROOT / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "noxfile.py", "README.md"):
        shutil.copy2(ROOT / name, checkout / name)
    # The machine as a user has it: no virtualenv of the test run's on PATH, a home of its own (~/lab-wheels).
    ours = [sys.prefix, os.environ.get("VIRTUAL_ENV") or sys.prefix]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "NOX"))}
    base |= {"PATH": _without(os.environ["PATH"], ours), "HOME": str(tmp_path)}
    system_python3 = shutil.which("python3", path=base["PATH"])
    assert system_python3, "no python3 on PATH"

    # The "GPU host": a virtualenv holding torch (this machine's pip configuration brings the CPU build).
    host = tmp_path / "gpuhost"
    _sh(f"{system_python3} -m venv {host} && {host}/bin/python -m pip install -q torch==2.13.0", tmp_path, base)
    offline = {**{k: v for k, v in base.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull,
               "PIP_NO_INDEX": "1", "PATH": f"{host / 'bin'}{os.pathsep}{base['PATH']}"}

    for command in blocks[1]:  # on the GPU host: its freeze
        _sh(command, checkout, offline)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for command in blocks[2]:  # on the connected host: this machine's target instead of the H200's
        command = re.sub(r"--python \S+", f"--python {python}", command)
        command = re.sub(r"--platform \S+", f"--platform {W.host_platform()}", command)
        log = _sh(command, checkout, base)
    wheels = tmp_path / "lab-wheels"
    requirements = (wheels / "requirements.txt").read_text()
    assert "left out: torch" not in requirements and "--have host.txt" in requirements
    left_out = [ln for ln in requirements.splitlines() if ln.startswith("#   left out: ")]
    assert any("typing-extensions" in ln or "jinja2" in ln for ln in left_out), (requirements[:3000], log)
    assert not (wheels / W.PIP_VENV).exists()  # the throw-away pip, if one was needed, is gone

    run = checkout / "runs" / "h200"
    for command in blocks[3]:  # on the GPU host again
        if "nox -s gpu_lab" in command:
            command += " --only toolchain"
        log = _sh(command, checkout, offline)
    assert "nothing installed" in log
    results = json.loads((run / "results.json").read_text())
    assert [(r["id"], r["status"]) for r in results["experiments"]] == [("toolchain", "OK")]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["python"]["executable"] == str(checkout / ".venv" / "bin" / "python")
    # the host environment is untouched: the wheels went into the overlay only
    after = subprocess.run([str(host / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True,
                           check=True, env=offline).stdout
    assert after == (checkout / "host.txt").read_text()
