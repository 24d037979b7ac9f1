"""`python -m lab images [VARIANT ...]`: build the lab's container images (docs/containers.md).

The exit status is 1 when a build FAILED or when no image was built at all (every variant NOT_RUN,
e.g. `no_docker`): a command whose only job did not happen must not read as a success (`nox -s images`).
A variant NOT_RUN beside one that was built (windows-msvc on a Linux host) does not fail it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from lab.containers.variants import BASE_TAG, REPORT_PATH, VARIANTS

    p = sub.add_parser("images", help="build container image variants (each ends OK, NOT_RUN with why, or FAILED)")
    p.add_argument("variants", nargs="*", default=["cpu"], metavar="VARIANT",
                   help=f"any of {', '.join(VARIANTS)} (default: cpu)")
    p.add_argument("--base-image", help=f"base image (default: {BASE_TAG} when present, else the Dockerfile's)")
    p.add_argument("--no-host-pip", action="store_true", help="do not pass the host's pip index/CA/wheelhouse")
    p.add_argument("--pip-cert", help="CA bundle for pip inside the build (default: the host pip's cert)")
    p.add_argument("--wheelhouse", action="append", default=[], help="folder of wheels to offer the build")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE", help="extra build argument")
    p.add_argument("--drop-stages", action="store_true",
                   help="remove the named deps stages after the build (saves disk; the next build starts cold)")
    p.add_argument("--report", type=Path, default=REPORT_PATH, help="where to write the build outcomes")
    return p


def parse_build_args(items: list[str]) -> dict[str, str]:
    extra = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--build-arg {item!r}: expected KEY=VALUE")
        extra[key] = value
    return extra


def main(args: argparse.Namespace) -> int:
    from lab.containers.build import build_images
    from lab.containers.pipconf import settings_from_options

    extra = parse_build_args(args.build_arg)
    pip = settings_from_options(args.no_host_pip, args.pip_cert, args.wheelhouse)
    outcomes = build_images(args.variants, args.base_image, pip, extra, args.report, args.drop_stages)
    print(f"{args.report}: " + ", ".join(f"{o.variant} {o.status}" for o in outcomes))
    return exit_status(outcomes)


def exit_status(outcomes: list[Any]) -> int:
    """1 when a build FAILED or none was built (saying why on stderr), else 0."""
    import sys

    if any(o.status == "FAILED" for o in outcomes):
        return 1
    if outcomes and not any(o.status == "OK" for o in outcomes):
        why = "; ".join(f"{o.variant}: {(o.reason or {}).get('code', '?')}" for o in outcomes)
        first = next((o.reason for o in outcomes if o.reason), None) or {}
        print(f"error: no image was built ({why}): {first.get('message') or 'the report says why for each'}",
              file=sys.stderr)
        return 1
    return 0
