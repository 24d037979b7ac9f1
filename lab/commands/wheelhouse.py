"""`python -m lab wheelhouse DIR [--python X.Y] [--platform TAG] [--have FILE]`: the lab's dependencies as wheels
for an offline host.

Run on a connected host; carry DIR to the GPU host and install from it there (README.md, "A GPU host
without network"). torch, Triton and the CUDA libraries are left out: the GPU host's are the ones
measured. With `--have FILE` (the GPU host's `pip freeze`), so is what the host already has at a version
the lab accepts; DIR/requirements.txt says what was left out and why. The logic is lab/host/wheelhouse.py;
standard library only, so any python3 with pip runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("wheelhouse", help="download the lab's dependencies (not torch) as wheels, with hashes, "
                                          "for a host without network")
    p.add_argument("dir", type=Path, metavar="DIR", help="folder for the wheels and requirements.txt")
    p.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                   help="the GPU host's Python as X.Y (default: this interpreter's)")
    p.add_argument("--platform", help="the GPU host's platform tag, e.g. manylinux_2_28_x86_64 (older manylinux "
                                      "tags are added; default: this host's)")
    p.add_argument("--have", type=Path, metavar="FILE",
                   help="the GPU host's `python3 -m pip freeze` (or `pip list --format=freeze`): leave out what it "
                        "has at a version the lab accepts (requirements.txt says what and why)")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.host import wheelhouse as W

    target = W.Target(args.python, args.platform or W.host_platform())
    have = W.read_have(args.have) if args.have is not None else None  # a bad FILE stops here, before pip runs
    requirements = W.lab_requirements(Path(__file__).resolve().parents[2] / "pyproject.toml")
    out: Path = args.dir
    print(f"resolving {len(requirements)} requirements for {target.describe()} (wheels only; torch, triton and "
          "nvidia-* left to the host)", file=sys.stderr)
    wheels = W.build(out, requirements, target, have=have, have_file=args.have,
                     say=lambda line: print(line, file=sys.stderr))
    size = sum((out / w.file).stat().st_size for w in wheels)
    print(f"{out}: {len(wheels)} wheels ({size / 2**20:.1f} MiB) and {out / W.REQUIREMENTS_FILE}; on the GPU host: "
          f"{W.venv_command(out)}")
    return 0
