"""After a fleet's array: which targets' runs landed (and why not, for the others), and one report over all.

A target has landed when its run folder holds a results.json whose run is complete. Every other
target is listed with what is known: its task's exit status, or no status at all (the task never
started or was killed: its Slurm log is named). Nothing silently disappears.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Callable

from lab.atomic import write_json_atomic
from lab.contract.schema import ResultsError, read_json
from lab.fleet.plan import Plan, load_plan

SUMMARY_NAME = "fleet-report.json"
REPORT_DIR = "report"


def target_outcome(results: Path, plan: Plan, index: int) -> dict[str, Any]:
    target = plan.target(index)
    status_path = results / "tasks" / f"{index}.json"
    status = json.loads(status_path.read_text()) if status_path.is_file() else None
    runs = sorted((results / "runs").glob(f"*--{target.name}")) if status is None else [Path(status["run_dir"])]
    outcome: dict[str, Any] = {"index": index, "name": target.name, "host": status and status["host"],
                               "run_dir": str(runs[0]) if runs else None, "exit_code": status and status["exit_code"],
                               "scheduler": status and status["scheduler"]}
    state = None
    if runs and (runs[0] / "results.json").is_file():
        try:  # the rule for a file in a folder the lab did not make (lab.untrusted)
            raw = read_json(runs[0] / "results.json")
        except ResultsError:
            raw = None
        run = raw.get("run") if isinstance(raw, dict) else None
        state = run.get("state") if isinstance(run, dict) else "unreadable"
    if state == "complete":
        outcome.update(status="landed", why=None)
    elif status is None:
        logs = [str(p) for j in plan.jobs if index in j["indices"] for p in [results / "slurm" / f"{j['job_id']}_{index}.out"]]
        outcome.update(status="missing", why=f"the task never reported (not started, or killed): see {', '.join(logs) or 'the scheduler'}")
    elif status["state"] == "running":
        outcome.update(status="missing", why="the task started but never finished (killed: time limit, node failure)")
    else:
        outcome.update(status="failed" if state is None else "incomplete",
                       why=f"the run exited with {status['exit_code']}" + (f"; its results say state {state}" if state else ""))
    return outcome


def render_report(results: Path, plan: Plan, run_dirs: list[str], log: Callable[[str], object]) -> int:
    """`python -m lab report RUN_DIR ... --out RESULTS/report` with the plan's interpreter; else inside an image."""
    out = results / REPORT_DIR
    cmd = [plan.python, "-m", "lab", "report", *run_dirs, "--out", str(out)]
    images = [t.variant for t in plan.targets if t.in_image]
    if not _runs(plan.python, "import jinja2, matplotlib", plan.repo) and images:  # every image has them
        inside = [f"/results/{Path(d).relative_to(results)}" for d in run_dirs]
        cmd = ["docker", "run", "--rm", "--network", "none", "-v", f"{results}:/results", f"graph-lab:{images[0]}",
               "report", *inside, "--out", f"/results/{REPORT_DIR}"]
    log("$ " + " ".join(cmd))
    try:
        return subprocess.run(cmd, cwd=plan.repo).returncode
    except OSError as exc:
        log(f"error: {cmd[0]}: {exc.strerror or exc}")
        return 127


def _runs(python: str, code: str, cwd: str) -> bool:
    try:
        return subprocess.run([python, "-c", code], capture_output=True, cwd=cwd).returncode == 0
    except OSError:
        return False


def finish(results: Path, log: Callable[[str], object] = print) -> dict[str, Any]:
    results = results.resolve()
    plan = load_plan(results)
    outcomes = [target_outcome(results, plan, t.index) for t in plan.targets]
    landed = [o["run_dir"] for o in outcomes if o["status"] == "landed"]
    for o in outcomes:
        log(f"{o['index']} {o['name']}: {o['status']}" + (f" on {o['host']}" if o["host"] else "")
            + (f" ({o['why']})" if o["why"] else ""))
    report_code = render_report(results, plan, landed, log) if landed else None
    summary = {"results": str(results), "targets": outcomes, "landed": len(landed), "total": len(outcomes),
               "report": str(results / REPORT_DIR / "index.html") if report_code == 0 else None,
               "compare": str(results / REPORT_DIR / "compare.html")
               if report_code == 0 and (results / REPORT_DIR / "compare.html").is_file() else None,
               "report_exit_code": report_code}
    write_json_atomic(results / SUMMARY_NAME, summary)
    log(f"{results / SUMMARY_NAME}: {len(landed)} of {len(outcomes)} runs landed"
        + (f"; report {summary['report']}" if summary["report"] else "; no report"))
    return summary
