"""`python -m lab base-image`: a Debian base image from the host's apt mirror, for hosts without a registry."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from lab.containers.variants import BASE_TAG

    p = sub.add_parser("base-image", help="debootstrap a Debian base from the host's apt mirror and import it "
                                          "(root; reused when present)")
    p.add_argument("--tag", default=BASE_TAG, help=f"image name (default {BASE_TAG})")
    p.add_argument("--suite", default="bookworm", help="Debian suite (default bookworm)")
    p.add_argument("--mirror", help="Debian mirror URL (default: the one the host's apt sources name)")
    p.add_argument("--security-mirror", help="Debian security mirror URL (default: the host's, else deb.debian.org)")
    p.add_argument("--force", action="store_true", help="remake it even if the image exists")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.containers.base import make_base_image

    o = make_base_image(args.tag, args.suite, args.mirror, args.force, args.security_mirror)
    print(f"{o.image}: {o.status}" + (f" ({o.reason['code']}: {o.reason['message']})" if o.reason else ""))
    return 0 if o.status == "OK" else 1
