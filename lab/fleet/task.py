"""One task of a fleet: find its target, run it on this node (in its image or the host's environment),
and record what happened in RESULTS/tasks/<index>.json, whatever the outcome."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from lab.atomic import write_json_atomic
from lab.fleet.plan import PLAN_NAME, Plan, Target, load_plan, run_dir
from lab.host.scheduler import scheduler_info

TARGETS_ENV = "LAB_FLEET_TARGETS"  # a Kubernetes Job carries its targets here (no plan file needed)


def node_name(env: Mapping[str, str]) -> str:
    """This node's short name, as the scheduler knows it."""
    return env.get("SLURMD_NODENAME") or env.get("LAB_NODE_NAME") or socket.gethostname().split(".")[0]


def find_target(results: Path, env: Mapping[str, str], index: int | None) -> tuple[Target, Plan | None]:
    """The target of this task: --index, else Slurm's array task id (a plan's index), else a Kubernetes
    Job's completion index into the targets it carries."""
    if (results / PLAN_NAME).is_file():
        plan = load_plan(results)
        if index is None:
            if not env.get("SLURM_ARRAY_TASK_ID"):
                raise ValueError("no --index and no SLURM_ARRAY_TASK_ID: which target is this task?")
            index = int(env["SLURM_ARRAY_TASK_ID"])
        return plan.target(index), plan
    if env.get(TARGETS_ENV):
        targets = [Target(**t) for t in json.loads(env[TARGETS_ENV])]
        position = index if index is not None else int(env.get("JOB_COMPLETION_INDEX", "-1"))
        if not 0 <= position < len(targets):
            raise ValueError(f"completion index {position}: the Job carries {len(targets)} target(s)")
        return targets[position], None
    raise FileNotFoundError(f"{results / PLAN_NAME}: no fleet plan there and no {TARGETS_ENV} in the environment")


def command(target: Target, out: Path, plan: Plan | None, env: Mapping[str, str]) -> list[str]:
    """The run's command: in the target's image through Docker, or `python -m lab run` right here (the host
    environment, or the target's image itself when the scheduler started this task in it)."""
    run = ["--profile", target.profile, "--out", str(out)] + (["--only", target.only] if target.only else [])
    if target.in_image and env.get("LAB_IMAGE_VARIANT") != target.variant:
        python = plan.host_python if plan else sys.executable
        return [python, "-m", "lab", "image-run", "--variant", target.variant, "--require-container", *run]
    python = plan.python if plan and not target.in_image else sys.executable
    return [python, "-m", "lab", "run", *run]


def run_task(results: Path, index: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    results = results.resolve()
    target, plan = find_target(results, env, index)
    host = node_name(env)
    out = run_dir(results, host, target)
    status_path = results / "tasks" / f"{target.index}.json"
    env.update({"LAB_FLEET_TARGET": target.name, "LAB_FLEET_INDEX": str(target.index),
                "LAB_FLEET_RESULTS": str(results)})
    cmd = command(target, out, plan, env)
    status = {"index": target.index, "target": asdict(target), "name": target.name, "host": host, "run_dir": str(out),
              "command": cmd, "scheduler": scheduler_info(env), "state": "running", "exit_code": None,
              "started_at": _now(), "finished_at": None}
    write_json_atomic(status_path, status)
    print(f"fleet task {target.index} ({target.name}) on {host}: {' '.join(cmd)}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        code = subprocess.run(cmd, env=env, cwd=plan.repo if plan else None).returncode
    except OSError as exc:  # the interpreter named in the plan is not on this node
        print(f"error: {cmd[0]}: {exc.strerror or exc}", file=sys.stderr)
        code = 127
    status.update(state="finished", exit_code=code, finished_at=_now())
    write_json_atomic(status_path, status)
    return code


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
