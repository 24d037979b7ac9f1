"""`python -m lab fleet --results DIR --profile P --variant V ...`: the lab on many hosts via Slurm (or Kubernetes).

The targets are every combination of the --profile, --variant, --partition and --constraint values.
On Slurm: one job array per partition/constraint, each task running its target on its node (in the
image, or in the host's environment for `--variant host`), each run written to DIR/runs/<host>--<target>,
then a report job rendering DIR/report with the cross-host comparison. With --k8s FILE: a Kubernetes
Indexed Job manifest instead (docs/fleet.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("fleet", help="run targets (profile x variant x partition/constraint) as a Slurm job array, "
                                     "then one report comparing the hosts (or write a Kubernetes manifest)")
    p.add_argument("--results", type=Path, help="shared results folder (every node must see it); not with --k8s")
    p.add_argument("--profile", action="append", required=True, help="smoke, cpu or gpu (repeatable)")
    p.add_argument("--variant", action="append", required=True,
                   help="`host` (the node's own Python environment) or an image variant, e.g. cpu, cuda (repeatable)")
    p.add_argument("--partition", action="append", help="Slurm partition (repeatable: one array each)")
    p.add_argument("--constraint", action="append",
                   help="Slurm --constraint feature (repeatable); for --k8s a node label LABEL=VALUE")
    p.add_argument("--only", help="comma-separated experiment ids, passed to every run")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with the lab's dependencies on the nodes (host targets and the report; "
                        "default: this one)")
    p.add_argument("--cpus", type=int, default=2, help="CPUs per task (default 2)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per task for GPU targets (default 1)")
    p.add_argument("--time", type=int, default=60, metavar="MIN", help="time limit per task in minutes (default 60)")
    p.add_argument("--sbatch-arg", action="append", default=[], help="further #SBATCH option, e.g. --account=X")
    p.add_argument("--wait", action="store_true", help="wait for the array and the report, then print the summary")
    p.add_argument("--timeout", type=float, default=7200, help="seconds --wait waits at most (default 7200)")
    p.add_argument("--dry-run", action="store_true", help="write the plan and sbatch scripts, submit nothing")
    p.add_argument("--k8s", type=Path, metavar="FILE", help="write a Kubernetes Indexed Job manifest instead of submitting")
    p.add_argument("--image-prefix", default="graph-lab", help="--k8s: the images' repository (default graph-lab)")
    p.add_argument("--claim", default="graph-lab-results", help="--k8s: the PersistentVolumeClaim mounted at /results")
    p.add_argument("--name", default="graph-lab-fleet", help="--k8s: the Jobs' name prefix")
    return p


def main(args: argparse.Namespace) -> int:
    import json
    import shutil

    from lab.containers.variants import REPO_ROOT
    from lab.fleet import k8s, slurm
    from lab.fleet.plan import Plan, make_targets

    targets = make_targets(args.profile, args.variant, args.partition, args.constraint, args.only)
    if args.cpus < 1 or args.gpus < 0 or args.time < 1:
        raise ValueError(f"--cpus {args.cpus} --gpus {args.gpus} --time {args.time}: cpus and time at least 1, "
                         "gpus at least 0")
    if args.k8s:
        docs = k8s.jobs(targets, args.image_prefix, args.claim, args.gpus, args.cpus, args.name)
        args.k8s.parent.mkdir(parents=True, exist_ok=True)
        args.k8s.write_text(k8s.manifest(docs))
        print(f"{args.k8s}: {len(docs)} Indexed Job(s), {len(targets)} target(s): "
              + ", ".join(t.name for t in targets))
        return 0
    if args.results is None:
        raise ValueError("--results DIR: the shared results folder the runs land in (required without --k8s)")
    results = args.results.resolve()
    host_python = shutil.which("python3") or sys.executable
    plan = Plan(results=str(results), repo=str(REPO_ROOT), python=args.python, host_python=host_python,
                targets=targets)
    opts = slurm.SlurmOptions(args.cpus, args.gpus, args.time, tuple(args.sbatch_arg))
    if not args.dry_run:
        slurm.require_sbatch()  # before anything is written: a refused fleet leaves no scripts behind
    results.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        folder = results / "slurm"
        folder.mkdir(exist_ok=True)
        for k, group in enumerate(slurm.groups(targets)):
            (folder / f"array-{k}.sbatch").write_text(slurm.array_script(plan, *group, opts))
        print(f"{plan.save()}: {len(targets)} target(s); scripts in {folder} (not submitted)")
        return 0
    slurm.submit(plan, opts)
    if not args.wait:
        print(f"{results}: results land in runs/, the report in report/ (python -m lab fleet-report {results})")
        return 0
    if not slurm.wait([j["job_id"] for j in plan.jobs] + [plan.report_job], args.timeout):
        print(f"error: the fleet did not finish within {args.timeout:.0f} s (squeue shows what is left)", file=sys.stderr)
        return 1
    summary_path = results / "fleet-report.json"
    if not summary_path.is_file():
        print(f"error: {summary_path}: the report job wrote no summary (see {results / 'slurm'})", file=sys.stderr)
        return 1
    summary = json.loads(summary_path.read_text())
    for t in summary["targets"]:
        print(f"  {t['name']}: {t['status']}" + (f" on {t['host']}" if t["host"] else "") + (f" ({t['why']})" if t["why"] else ""))
    print(f"{summary['landed']} of {summary['total']} runs landed; report: {summary['report'] or 'none'}")
    return 0 if summary["landed"] == summary["total"] and summary["report"] else 1
