"""`python3 -m lab venv DIR --wheels WHEELS`: on a GPU host without network, the lab's interpreter in DIR.

Run it with the python3 that holds the torch to measure, from a checkout, with the wheelhouse carried over
(README.md, "A GPU host without network"): DIR becomes a virtualenv that sees that interpreter's packages and
holds the wheels, so `DIR/bin/python -m nox -s gpu_lab --no-venv` runs the lab there. The host environment is not
changed; `rm -r DIR` undoes it. Why an overlay and not `venv --system-site-packages`: lab/host/overlay.py.
Standard library only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("venv", help="on a GPU host without network: a virtualenv that sees this interpreter's torch "
                                    "and holds the offline wheelhouse")
    p.add_argument("dir", type=Path, metavar="DIR", help="the virtualenv to make (remade if it exists)")
    p.add_argument("--wheels", type=Path, required=True, metavar="WHEELS",
                   help="the wheelhouse folder made by `python3 -m lab wheelhouse` (with its requirements.txt)")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.host import overlay

    host = overlay.Host.current()
    print(f"making {args.dir}: a virtualenv on {host.base} that sees the packages of {host.executable} "
          f"({len(host.site_dirs)} site folders) and holds the wheels of {args.wheels}", file=sys.stderr)
    python = overlay.make(args.dir, args.wheels, host)
    print(f"{args.dir}: ready; the lab's interpreter is {python} (e.g. {python} -m nox -s gpu_lab --no-venv)")
    return 0
