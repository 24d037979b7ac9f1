"""The fleet on Slurm: one job array per (partition, constraint, GPU or not), then a report job after them.

A Slurm array shares one partition and one constraint, so targets are grouped by those; the array's
task ids are the targets' own indices (`--array=0,2,5`), so a task finds its target in the plan by
SLURM_ARRAY_TASK_ID. The report job depends on every array (`afterany`: it runs whatever became of
them and says which runs did not land).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab.fleet.plan import Plan, Target


@dataclass(frozen=True)
class SlurmOptions:
    cpus_per_task: int = 2
    gpus_per_task: int = 1  # for targets that need a GPU (--gres=gpu:N)
    time_min: int = 60
    extra: tuple[str, ...] = ()  # further #SBATCH options, verbatim (e.g. --account=X)


def groups(targets: list[Target]) -> list[tuple[str | None, str | None, bool, list[Target]]]:
    """Targets grouped by what a Slurm array must share: partition, constraint, GPU request."""
    out: dict[tuple[str | None, str | None, bool], list[Target]] = {}
    for t in targets:
        out.setdefault((t.partition, t.constraint, t.gpu), []).append(t)
    return [(p, c, g, ts) for (p, c, g), ts in out.items()]


def _header(lines: list[str]) -> str:
    return "#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines)


def array_script(plan: Plan, partition: str | None, constraint: str | None, gpu: bool, targets: list[Target],
                 opts: SlurmOptions) -> str:
    results = Path(plan.results)
    lines = ["--job-name=graph-lab-fleet", f"--array={','.join(str(t.index) for t in targets)}",
             f"--cpus-per-task={opts.cpus_per_task}", f"--time={opts.time_min}",
             f"--output={results / 'slurm' / '%A_%a.out'}", f"--chdir={plan.repo}"]
    if partition:
        lines.append(f"--partition={partition}")
    if constraint:
        lines.append(f"--constraint={constraint}")
    if gpu and opts.gpus_per_task:
        lines.append(f"--gres=gpu:{opts.gpus_per_task}")
    lines += list(opts.extra)
    names = ", ".join(f"{t.index}: {t.name}" for t in targets)
    return (_header(lines) + f"# Written by `python -m lab fleet` (docs/fleet.md). Targets {names}.\n"
            f"exec {shlex.quote(plan.host_python)} -m lab fleet-task {shlex.quote(str(results))}\n")


def report_script(plan: Plan, after: list[str]) -> str:
    results = Path(plan.results)
    lines = ["--job-name=graph-lab-fleet-report", f"--dependency=afterany:{':'.join(after)}",
             "--kill-on-invalid-dep=yes", "--cpus-per-task=1", "--time=30",
             f"--output={results / 'slurm' / 'report-%j.out'}", f"--chdir={plan.repo}"]
    partitions = {t.partition for t in plan.targets}
    if len(partitions) == 1 and None not in partitions:
        lines.append(f"--partition={partitions.pop()}")
    return (_header(lines) + "# After every array of the fleet: which runs landed, and one report over them.\n"
            f"exec {shlex.quote(plan.host_python)} -m lab fleet-report {shlex.quote(str(results))}\n")


NO_SBATCH = ("sbatch is not on PATH: run `python -m lab fleet` on a Slurm login node, write the scripts without "
             "submitting them with --dry-run, or write a Kubernetes manifest with --k8s FILE")


def require_sbatch() -> None:
    """A one-line error (ValueError) unless sbatch is on PATH: checked before anything is written."""
    if shutil.which("sbatch") is None:
        raise ValueError(NO_SBATCH)


def sbatch(script: Path) -> str:
    """Submit a script; its job id. A refusal is a one-line error with Slurm's own words."""
    try:
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ValueError(NO_SBATCH) from None
    if out.returncode != 0:
        raise ValueError(f"sbatch {script} refused: {(out.stderr.strip().splitlines() or ['no reason'])[-1]}")
    return out.stdout.strip().split(";")[0]


def submit(plan: Plan, opts: SlurmOptions, log: Callable[[str], object] = print) -> Plan:
    """Write one sbatch script per group and the report job's, submit them, and record the ids in the plan.
    Without sbatch nothing is written (one-line error)."""
    require_sbatch()
    folder = Path(plan.results) / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    for k, (partition, constraint, gpu, targets) in enumerate(groups(plan.targets)):
        script = folder / f"array-{k}.sbatch"
        script.write_text(array_script(plan, partition, constraint, gpu, targets, opts))
        job = sbatch(script)
        plan.jobs.append({"job_id": job, "script": str(script), "partition": partition, "constraint": constraint,
                          "gpu": gpu, "indices": [t.index for t in targets]})
        log(f"submitted job array {job}: " + ", ".join(t.name for t in targets))
    script = folder / "report.sbatch"
    script.write_text(report_script(plan, [j["job_id"] for j in plan.jobs]))
    plan.report_job = sbatch(script)
    log(f"submitted report job {plan.report_job} (after {', '.join(j['job_id'] for j in plan.jobs)})")
    plan.save()
    return plan


def pending(job_ids: list[str]) -> list[str]:
    """The jobs (array tasks included) Slurm still has queued or running."""
    out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:  # every id already purged: "Invalid job id specified"
        return []
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def wait(job_ids: list[str], timeout_s: float, poll_s: float = 3.0, log: Callable[[str], object] = print) -> bool:
    """Until none of the jobs is queued or running (True), or the timeout (False)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        left = pending(job_ids)
        if not left:
            return True
        if left != last:
            log(f"waiting for {', '.join(left)}")
            last = left
        time.sleep(poll_s)
    return False
