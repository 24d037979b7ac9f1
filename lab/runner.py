"""The runner: check each experiment's prerequisites, run it, record OK / NOT_RUN / FAILED, save at once.

Before anything runs, the declared options of every selected experiment are resolved (defaults, the
profile's overrides, `--set`; lab.options) and written to the manifest: a bad name or value stops
the run with one line. An experiment then receives a `Context`: `ctx.options`, the profile, the
device, a clock, and a recorder that accepts only the metrics its catalogue entry declares.

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
from lab.catalogue import BY_ID, ExperimentSpec, resolve
from lab.manifest import collect, now_iso
from lab.metrics import Kind, MetricSpec
from lab.options import OptionsError, as_dict
from lab.options import resolve as resolve_options
from lab.profiles import Profile
from lab.reasons import Code
from lab.results import (MANIFEST_NAME, Check, Metric, Reason, Record, Results, RunInfo, Samples, Skipped, Spread,
                         quarantine, save, write_json_atomic)
from lab.timing import clock_for, spread
from lab.toolchain import Toolchain, probe

T = TypeVar("T")
console = Console(stderr=True, highlight=False, soft_wrap=True)


class NotRun(Exception):
    """Raised by an experiment that finds, once started, that it cannot run here."""

    def __init__(self, code: Code, message: str) -> None:
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


def options_for(spec: ExperimentSpec, profile: Profile, set_text: dict[str, str] | None = None) -> Any:
    """The experiment's declared Options with the profile's values and `--set` text applied (OptionsError if bad)."""
    return resolve_options(spec.options_class(), spec.id, profile.options.get(spec.id), set_text, profile.name)


def resolve_all(specs: list[ExperimentSpec], profile: Profile,
                set_text: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The resolved options of every selected experiment, before anything runs: a bad profile value or a bad
    `--set` (unknown experiment, unknown key, wrong type) is one OptionsError. `--set` for an experiment that is
    not selected is checked too."""
    set_text = set_text or {}
    unknown = [e for e in set_text if e not in BY_ID]
    if unknown:
        raise OptionsError(f"--set {unknown[0]}.{next(iter(set_text[unknown[0]]))}: unknown experiment "
                           f"{unknown[0]!r} (valid: {', '.join(BY_ID)})")
    wanted = [s.id for s in specs] + [e for e in set_text if e not in {s.id for s in specs}]
    return {eid: options_for(BY_ID[eid], profile, set_text.get(eid)) for eid in wanted}


class Context:
    """What an experiment receives: the profile, its resolved options, the device, a clock, and a recorder."""

    def __init__(self, spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, record: Record,
                 results: Results, models: ModelCache, options: Any = None, out_dir: Path | None = None) -> None:
        self.spec = spec
        self.out_dir = out_dir  # the run directory (None outside a run): where files beside results.json go
        self.profile = profile
        self.options = options if options is not None else options_for(spec, profile)
        self.toolchain = toolchain
        self.record = record
        self.results = results
        self._models = models
        self.device = torch.device(profile.device)
        self.clock = clock_for(self.device)

    # ---- recording
    def _declared(self, spec: MetricSpec, value: Any) -> MetricSpec:
        """`spec` if this experiment declares it (lab.catalogue) and `value` is of its kind; else ValueError."""
        name = getattr(spec, "name", spec)
        if not isinstance(spec, MetricSpec) or spec not in self.spec.metrics:
            raise ValueError(f"{self.spec.id} recorded metric {name!r}, which its catalogue entry does not declare "
                             f"(lab/catalogue.py; new names are declared in lab/metrics.py)")
        if not spec.accepts(value):
            raise ValueError(f"{self.spec.id} recorded metric {name!r} = {value!r} ({type(value).__name__}): "
                             f"lab/metrics.py declares it {spec.kind.value}")
        return spec

    def metric(self, spec: MetricSpec, value: Any, /, **params: Any) -> Metric:
        """Record one value of a declared metric (its unit comes from the declaration)."""
        self._declared(spec, value)
        m = Metric(name=spec.name, value=value, unit=spec.unit, params=params)
        self.record.metrics.append(m)
        return m

    def timing(self, spec: MetricSpec, samples: list[float], /, **params: Any) -> Spread:
        """A timing: the median as the metric's value, its spread, and the raw samples kept."""
        if isinstance(spec, MetricSpec) and spec.kind is not Kind.NUMBER:
            raise ValueError(f"{self.spec.id} timed metric {spec.name!r}, which lab/metrics.py declares "
                             f"{spec.kind.value}")
        sp = spread(samples)
        self._declared(spec, sp.median)
        self.record.metrics.append(Metric(name=spec.name, value=sp.median, unit=spec.unit, params=params, spread=sp))
        self.record.samples.append(Samples(name=spec.name, unit=spec.unit, params=params,
                                           values=[float(f"{x:.6g}") for x in samples]))
        return sp

    def check(self, name: str, passed: bool, /, detail: str = "", fatal: bool = True, **params: Any) -> bool:
        self.record.checks.append(Check(name=name, passed=bool(passed), detail=detail, params=params, fatal=fatal))
        return bool(passed)

    def note(self, key: str, value: Any) -> None:
        self.record.notes[key] = value

    def skip(self, item: str, code: Code, message: str) -> None:
        """A part of this experiment that did not run: listed in the record, never dropped."""
        self.record.skipped.append(Skipped(item=item, code=code, message=message))
        self.progress(f"skipped {item}: {code}")

    # ---- helpers
    def gpt2(self, dtype: str | None = None) -> tuple[Any, Any]:
        """(transformers model, lab Weights) of the profile's GPT-2, on the profile's device."""
        return self._models.get(dtype)

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
        record.reason = Reason(Code.CHECK_FAILED, f"correctness check(s) failed: {names}")


def run_experiment(spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, results: Results,
                   models: ModelCache, options: Any = None, out_dir: Path | None = None) -> Record:
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
            raise NotRun(Code.NOT_IMPLEMENTED, f"this lab version ({__version__}) has no implementation of "
                                            f"{spec.id} yet: update the lab") from None
        ctx = Context(spec, profile, toolchain, record, results, models, options, out_dir)
        module.run(ctx)
    except NotRun as exc:
        record.status, record.reason = "NOT_RUN", exc.reason
    except Exception as exc:
        record.status = "FAILED"
        record.reason = Reason(Code.EXCEPTION, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
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
        argv: list[str] | None = None, on_record: Callable[[Record], None] | None = None,
        set_text: dict[str, dict[str, str]] | None = None) -> Results:
    """Run the profile's experiments (or `only` these) and write out_dir/results.json after each.

    `set_text` is `--set` as {experiment: {option: text}}. Every selected experiment's options are
    resolved before anything runs, so a bad value stops the run at once (OptionsError)."""
    from lab.model import resolve_weights

    specs = resolve(only or (list(profile.experiments) if profile.experiments else None), sweeps=profile.sweeps)
    options = resolve_all(specs, profile, set_text)
    if profile.threads:
        torch.set_num_threads(profile.threads)
    provenance = resolve_weights(profile.model, weights)
    toolchain = probe()
    manifest = collect(weights=provenance, toolchain=toolchain)
    manifest["profile"] = profile.params()
    manifest["options"] = {spec.id: as_dict(options[spec.id]) for spec in specs}
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
            record = run_experiment(spec, profile, toolchain, results, models, options[spec.id], out_dir)
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
