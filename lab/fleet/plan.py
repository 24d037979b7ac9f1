"""A fleet's targets and its plan file: what each array task reads to know what to run and where to write.

A target is one run: a profile, a variant (`host`: the node's own Python environment; else one of the
lab's images) and optionally a Slurm partition and/or constraint. The targets are the product of the
lists given; their order is their index (the array task id). RESULTS/fleet.json holds them with the
interpreter and checkout the tasks use; each run lands in RESULTS/runs/<host>--<target name>.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.atomic import write_json_atomic
from lab.containers.variants import VARIANTS

PLAN_NAME = "fleet.json"
PLAN_VERSION = 1
HOST = "host"  # the variant that runs in the node's own environment, not in an image
PROFILES = ("smoke", "cpu", "gpu")


@dataclass(frozen=True)
class Target:
    index: int
    profile: str
    variant: str
    partition: str | None = None
    constraint: str | None = None
    only: str | None = None  # comma-separated experiment ids, passed to `run`

    @property
    def name(self) -> str:
        """profile-variant[-partition][-constraint], safe as a folder name."""
        parts = [self.profile, self.variant, self.partition, self.constraint]
        return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", p) for p in parts if p)

    @property
    def in_image(self) -> bool:
        return self.variant != HOST

    @property
    def gpu(self) -> bool:
        return self.profile == "gpu" or (self.in_image and VARIANTS[self.variant].gpu)


def make_targets(profiles: list[str], variants: list[str], partitions: list[str] | None = None,
                 constraints: list[str] | None = None, only: str | None = None) -> list[Target]:
    """Every combination of the lists, in order; unknown profiles or variants are one-line errors."""
    for p in profiles:
        if p not in PROFILES:
            raise ValueError(f"--profile {p}: unknown (choose from {', '.join(PROFILES)})")
    runnable = [n for n, v in VARIANTS.items() if v.os == "linux" and v.target != "resolve"]
    for v in variants:
        if v != HOST and v not in runnable:
            raise ValueError(f"--variant {v}: unknown or not runnable in a fleet (choose from {HOST}, "
                             f"{', '.join(runnable)})")
    combos = itertools.product(profiles, variants, partitions or (None,), constraints or (None,))
    targets = [Target(i, p, v, part, con, only) for i, (p, v, part, con) in enumerate(combos)]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError("the same target is listed twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    return targets


@dataclass
class Plan:
    """What every task of a fleet reads (RESULTS/fleet.json)."""

    results: str  # the shared results folder (absolute)
    repo: str  # the lab checkout the tasks run from (shared with the nodes)
    python: str  # the interpreter with the lab's dependencies (host targets and the report)
    host_python: str  # the interpreter that drives Docker (standard library only is enough)
    targets: list[Target]
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    submitted_from: str = field(default_factory=socket.gethostname)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # one per sbatch: ids, target indices
    report_job: str | None = None
    version: int = PLAN_VERSION

    def target(self, index: int) -> Target:
        for t in self.targets:
            if t.index == index:
                return t
        raise ValueError(f"{self.results}/{PLAN_NAME}: no target with index {index} "
                         f"(the plan has {', '.join(str(t.index) for t in self.targets)})")

    def save(self) -> Path:
        path = Path(self.results) / PLAN_NAME
        write_json_atomic(path, asdict(self))
        return path


def load_plan(results: Path) -> Plan:
    path = results / PLAN_NAME
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise FileNotFoundError(f"{path}: cannot read the fleet's plan ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(raw, dict) or raw.get("version") != PLAN_VERSION:
        raise ValueError(f"{path}: not a fleet plan of version {PLAN_VERSION}")
    raw["targets"] = [Target(**t) for t in raw["targets"]]
    return Plan(**raw)


def run_dir(results: Path, host: str, target: Target) -> Path:
    """Where one target's run lands: named by the host it ran on and the target."""
    return results / "runs" / f"{host}--{target.name}"
