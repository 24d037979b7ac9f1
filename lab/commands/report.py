"""`python -m lab report [RUN_DIR ...] [--out DIR] [--baseline RUN]`: render the static report site.

Without RUN_DIR it reads every run under manifests/ (committed reference runs) and runs/ (local
ones). A file that cannot be read is reported on one line naming it, and the other runs still render.
The site is built beside --out and swapped in only when complete (report.site.files): a render that
fails or finds no run leaves the previous site as it was. Rendering into the folder of an earlier report
removes the pages this report did not write (`run-*.html`, `compare.html`, `history.html`, `traces/`):
no stale page survives; other files there are left alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="render the static HTML report from run directories (default: manifests/ runs/)")
    p.add_argument("paths", nargs="*", type=Path, metavar="RUN_DIR",
                   help="run directories, results.json files, or folders holding runs (default: manifests/ and runs/)")
    p.add_argument("--out", type=Path, default=Path("site"),
                   help="output folder (default: site/); an earlier report's pages there are replaced or removed")
    p.add_argument("--strict", action="store_true", help="exit 1 when any file was skipped")
    p.add_argument("--baseline", metavar="RUN", help="the run the comparison page sets every other run against: its "
                   "name on the site, or its directory (default: per profile, the newest run)")
    return p


def main(args: argparse.Namespace) -> int:
    from lab.untrusted import safe
    from report import render_site
    from report.site.discover import DEFAULT_ROOTS, default_paths

    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file; the report is a folder of pages (e.g. --out site)")
    paths = args.paths or default_paths()
    if not paths:
        raise ValueError(f"no run given and none of {', '.join(d + '/' for d in DEFAULT_ROOTS)} exists here "
                         "(run `nox -s smoke` or `python -m lab run` first)")
    try:
        site = render_site(paths, out, baseline=args.baseline)
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write the report there ({exc.strerror or exc}); the previous "
                         "site, if any, is unchanged") from None
    for skipped in site.skipped:
        print(f"error: {safe(skipped.reason)} (skipped)", file=sys.stderr)
    if not site.runs:
        raise ValueError(f"no run could be rendered from {', '.join(str(p) for p in paths)}; "
                         f"--out {out} is unchanged")
    extra = f", comparison {site.compare}" if site.compare else ""
    print(f"{site.index}: {len(site.runs)} run(s), {len(site.skipped)} skipped{extra}")
    return 1 if args.strict and site.skipped else 0
