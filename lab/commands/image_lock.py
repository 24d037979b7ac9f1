"""`python -m lab image-lock cpu|cuda`: remake docker/lock-<family>.txt (every package pinned with its sha256)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("image-lock", help="resolve an image family's requirements into its lock file (with hashes)")
    p.add_argument("family", choices=("cpu", "cuda"), help="the images whose lock to remake")
    p.add_argument("--base-image", help="base image (default: graph-lab-base:bookworm when present)")
    p.add_argument("--no-host-pip", action="store_true", help="do not pass the host's pip index/CA/wheelhouse")
    p.add_argument("--pip-cert", help="CA bundle for pip inside the build (default: the host pip's cert)")
    p.add_argument("--wheelhouse", action="append", default=[], help="folder of wheels to offer the resolver")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="override an input, e.g. TORCH_SPEC=torch==2.11.0")
    return p


def main(args: argparse.Namespace) -> int:
    import sys

    from lab.commands.images import parse_build_args
    from lab.containers.lock import make_lock
    from lab.containers.pipconf import settings_from_options

    pip = settings_from_options(args.no_host_pip, args.pip_cert, args.wheelhouse)
    try:
        make_lock(args.family, pip, args.base_image, parse_build_args(args.build_arg))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
