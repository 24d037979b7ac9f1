"""`python -m lab env [--out FILE]`: print the environment manifest, or (--out) write it as JSON and say so."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("env", help="print the environment manifest (or write it with --out)")
    p.add_argument("--out", type=Path, help="write the manifest to this JSON file instead of printing it")
    p.add_argument("--profile", default="cpu", help="profile whose model's weights provenance to record")
    p.add_argument("--weights", help="local GPT-2 checkpoint folder, or 'random'")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.run import manifest
    from lab.contract import profiles
    from lab.step.model import resolve_weights
    from lab.contract.results import write_json_atomic

    out: Path | None = args.out
    if out is not None and out.is_dir():
        raise ValueError(f"--out {out}: is a directory; give the file to write, e.g. --out {out / 'manifest.json'}")
    profile = profiles.get(args.profile)
    data = manifest.collect(weights=resolve_weights(profile.model, args.weights))
    if out is None:
        print(json.dumps(data, indent=1, default=str))
        return 0
    try:
        write_json_atomic(out, data)
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None
    print(f"wrote {out}")
    return 0
