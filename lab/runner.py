"""The runner: check each experiment's prerequisites, run it, record OK / NOT_RUN / FAILED, save at once.

Every experiment in the selection ends as exactly one record: prerequisites missing -> NOT_RUN with
the toolchain's reason; raises -> FAILED with the error and a traceback excerpt; a fatal correctness
check that fails -> FAILED (`check_failed`). results.json is rewritten atomically after each record.
"""

from __future__ import annotations

import importlib
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import torch
from rich.console import Console

from lab import __version__
from lab.catalogue import ExperimentSpec, resolve
from lab.manifest import collect, now_iso
from lab.profiles import Profile
from lab.results import (MANIFEST_NAME, Check, Metric, Reason, Record, Results, RunInfo, Samples, Skipped, Spread,
                         quarantine, save, write_json_atomic)
from lab.timing import clock_for, spread
from lab.toolchain import Toolchain, probe

T = TypeVar("T")
console = Console(stderr=True, highlight=False, soft_wrap=True)


class NotRun(Exception):
    """Raised by an experiment that finds, once started, that it cannot run here."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.reason = Reason(code, message)


class ModelCache:
    """One GPT-2 per (dtype, device) per run: building the 124M model takes seconds."""

    def __init__(self, profile: Profile, provenance: dict[str, Any]) -> None:
        self.profile = profile
        self.provenance = provenance
        self._cache: dict[tuple[str, str], tuple[Any, Any]] = {}

    def get(self, dtype: str | None = None, device: str | None = None) -> tuple[Any, Any]:
        from lab.model import build_model, extract_weights, torch_dtype

        key = (dtype or self.profile.dtype, device or self.profile.device)
        if key not in self._cache:
            model = build_model(self.profile.model, self.provenance, device=key[1], dtype=torch_dtype(key[0]))
            self._cache[key] = (model, extract_weights(model))
        return self._cache[key]


class Context:
    """What an experiment receives: the profile, the device, a clock, and a recorder."""

    def __init__(self, spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, record: Record,
                 results: Results, models: ModelCache) -> None:
        self.spec = spec
        self.profile = profile
        self.toolchain = toolchain
        self.record = record
        self.results = results
        self._models = models
        self.device = torch.device(profile.device)
        self.clock = clock_for(self.device)

    # ---- recording
    def metric(self, name: str, value: Any, unit: str, /, **params: Any) -> Metric:
        m = Metric(name=name, value=value, unit=unit, params=params)
        self.record.metrics.append(m)
        return m

    def timing(self, name: str, samples: list[float], unit: str = "ms", /, **params: Any) -> Spread:
        """A timing: the median as the metric's value, its spread, and the raw samples kept."""
        sp = spread(samples)
        self.record.metrics.append(Metric(name=name, value=sp.median, unit=unit, params=params, spread=sp))
        self.record.samples.append(Samples(name=name, unit=unit, params=params,
                                           values=[float(f"{x:.6g}") for x in samples]))
        return sp

    def check(self, name: str, passed: bool, /, detail: str = "", fatal: bool = True, **params: Any) -> bool:
        self.record.checks.append(Check(name=name, passed=bool(passed), detail=detail, params=params, fatal=fatal))
        return bool(passed)

    def note(self, key: str, value: Any) -> None:
        self.record.notes[key] = value

    def skip(self, item: str, code: str, message: str) -> None:
        """A part of this experiment that did not run: listed in the record, never dropped."""
        self.record.skipped.append(Skipped(item=item, code=code, message=message))
        self.progress(f"skipped {item}: {code}")

    # ---- helpers
    def gpt2(self, dtype: str | None = None) -> tuple[Any, Any]:
        """(transformers model, lab Weights) of the profile's GPT-2, on the profile's device."""
        return self._models.get(dtype)

    def opt(self, key: str, default: Any = None) -> Any:
        return self.profile.opt(self.spec.id, key, default)

    def progress(self, message: str) -> None:
        console.print(f"    [dim]{self.spec.id}: {message}[/dim]")

    def track(self, items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
        from rich.progress import track

        yield from track(items, description=f"    {self.spec.id}: {description}", total=total, console=console,
                         transient=True)


def prerequisite_reason(spec: ExperimentSpec, profile: Profile, toolchain: Toolchain) -> Reason | None:
    needs = list(spec.needs)
    if profile.device == "cuda" and "host" not in needs and "cuda" not in needs:
        needs.insert(0, "cuda")  # everything in a CUDA profile runs on the GPU
    for need in needs:
        reason = toolchain.reason_for(need, profile.device)
        if reason is not None:
            return reason
    return None


def _finish_status(record: Record) -> None:
    failed = [c for c in record.checks if c.fatal and not c.passed]
    if record.status == "OK" and failed:
        record.status = "FAILED"
        names = ", ".join(c.name for c in failed[:5])
        record.reason = Reason("check_failed", f"correctness check(s) failed: {names}")


def run_experiment(spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, results: Results,
                   models: ModelCache) -> Record:
    record = Record(id=spec.id, title=spec.title, status="OK", started_at=now_iso())
    reason = prerequisite_reason(spec, profile, toolchain)
    if reason is not None:
        record.status, record.reason = "NOT_RUN", reason
        return record
    start = time.perf_counter()
    try:
        try:
            module = importlib.import_module(spec.module)
        except ModuleNotFoundError as exc:
            if exc.name != spec.module:
                raise
            raise NotRun("not_implemented", f"this lab version ({__version__}) has no implementation of "
                                            f"{spec.id} yet: update the lab") from None
        ctx = Context(spec, profile, toolchain, record, results, models)
        module.run(ctx)
    except NotRun as exc:
        record.status, record.reason = "NOT_RUN", exc.reason
    except Exception as exc:
        record.status = "FAILED"
        record.reason = Reason("exception", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        record.error = {"type": type(exc).__name__, "message": str(exc)[:2000],
                        "traceback": "".join(traceback.format_exc().splitlines(keepends=True)[-25:])}
    record.duration_s = round(time.perf_counter() - start, 3)
    _finish_status(record)
    _refuse_unrecordable(record)
    return record


def _refuse_unrecordable(record: Record) -> None:
    """What the results schema refuses (a tensor as a value, text in a numeric metric) is removed from the
    record, which becomes FAILED naming it: the experiment fails, the run and the file stay whole."""
    problems = quarantine(record)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        record.status = "FAILED"
        record.reason = Reason("exception", f"a value could not be recorded: {problems[0]}{more}")
        record.error = {"type": "ResultsError", "message": "; ".join(problems)[:2000], "traceback": ""}


def run(profile: Profile, out_dir: Path, only: list[str] | None = None, weights: str | None = None,
        argv: list[str] | None = None, on_record: Callable[[Record], None] | None = None) -> Results:
    """Run the profile's experiments (or `only` these) and write out_dir/results.json after each."""
    from lab.model import resolve_weights

    specs = resolve(only or (list(profile.experiments) if profile.experiments else None))
    if profile.threads:
        torch.set_num_threads(profile.threads)
    provenance = resolve_weights(profile.model, weights)
    toolchain = probe()
    manifest = collect(weights=provenance, toolchain=toolchain)
    manifest["profile"] = profile.params()
    results = Results(run=RunInfo(profile=profile.name, started_at=now_iso(), argv=argv or [], only=only),
                      manifest=manifest, lab_version=__version__)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / MANIFEST_NAME, manifest)
    save(results, out_dir)
    models = ModelCache(profile, provenance)
    wall_start = time.perf_counter()
    console.print(f"[bold]lab run[/bold] profile={profile.name} device={profile.device} "
                  f"experiments={len(specs)} -> {out_dir / 'results.json'}")
    try:
        for i, spec in enumerate(specs, 1):
            console.print(f"[{i}/{len(specs)}] {spec.id}: {spec.title}")
            record = run_experiment(spec, profile, toolchain, results, models)
            results.experiments.append(record)
            results.run.wall_s = round(time.perf_counter() - wall_start, 3)
            save(results, out_dir)
            style = {"OK": "green", "NOT_RUN": "yellow", "FAILED": "red"}[record.status]
            why = f" ({record.reason.code}: {record.reason.message})" if record.reason else ""
            console.print(f"    [{style}]{record.status}[/{style}] in {record.duration_s:.1f} s{why}")
            if on_record:
                on_record(record)
    except KeyboardInterrupt:
        results.run.state = "interrupted"
        results.run.finished_at = now_iso()
        results.run.wall_s = round(time.perf_counter() - wall_start, 3)
        save(results, out_dir)
        raise
    results.run.state = "complete"
    results.run.finished_at = now_iso()
    results.run.wall_s = round(time.perf_counter() - wall_start, 3)
    save(results, out_dir)
    return results
