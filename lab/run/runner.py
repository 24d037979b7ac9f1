"""The runner: check each experiment's prerequisites, run it, record OK / NOT_RUN / FAILED, save at once.

Before anything runs, the declared options of every selected experiment are resolved (defaults, the
profile's overrides, `--set`; lab.contract.options) and written to the manifest: a bad name or value stops
the run with one line. An experiment then receives a `Context` (lab.run.context): `ctx.options`, the
profile, the device, a clock, and a recorder that accepts only the metrics its catalogue entry declares.

The run directory is claimed first (lab.run.rundir): one run at a time, and a directory holding a run is
refused unless resumed or forced aside. Every experiment in the selection ends as exactly one record:
prerequisites missing -> NOT_RUN with the toolchain's reason; raises (SystemExit included) -> FAILED
with the error and a traceback excerpt; a value the results file cannot hold -> FAILED naming it, where
it was recorded; a fatal correctness check that fails -> FAILED (`check_failed`); the run stopped
(Ctrl-C, SIGTERM, SIGHUP, an error of the runner) -> NOT_RUN `interrupted` for the experiment under
way and every one not reached (lab.run.runstate). results.json is rewritten atomically after each record.
With a time budget (lab.run.budget, `--stop-after`), the run stops between experiments before one expected to
cross it: state `stopped`, the experiments not started have no record (they were not attempted), and a
`--resume` runs them.

Everything printed goes through lab.console (stderr); what libraries print or log while an experiment
runs is caught by lab.run.librarylogs and stored in its record (`library_logs`), shown live with `verbose`.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from lab import __version__, heartbeat
from lab.run import budget as run_budget, rundir, runsay, runstate
from lab import console as out
from lab.contract import notes
from lab.contract.catalogue import BY_ID, ExperimentSpec, resolve
from lab.run.context import Context, ModelCache, experiment_module, options_for
from lab.run.librarylogs import Capture
from lab.locks import clean_abandoned_tempdirs
from lab.run.manifest import collect, finish, now_iso
from lab.contract import metrics as M
from lab.contract import query
from lab.contract.names import Experiment, Status
from lab.contract.options import OptionsError, as_dict
from lab.contract.profiles import Profile
from lab.contract.reasons import Code
from lab.contract.results import (MANIFEST_NAME, RESULTS_NAME, Check, Reason, Record, Results, RunInfo, RunState,
                         quarantine, save, write_json_atomic)
from lab.measure import profiler_guard
from lab.host.toolchain import Toolchain, probe


class NotRun(Exception):
    """Raised by an experiment that finds, once started, that it cannot run here."""

    def __init__(self, code: Code, message: str, reason: Reason | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.reason = reason or Reason(code, message)


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


def _clean_launch_us(results: Results) -> float | None:
    """The cost of one tiny eager op the sentinel measured in its fresh process at the start (None: no sentinel)."""
    m = query.maybe(query.ok(results, Experiment.SENTINEL), M.LAUNCH_US_PER_OP, when="start")
    return None if m is None else float(m.value)


def needs_for(spec: ExperimentSpec, profile: Profile) -> tuple[str, ...]:
    """The experiment's prerequisites under `profile`: its catalogue needs, and `cuda` first in a CUDA profile
    unless it runs on the host (everything else there runs on the GPU)."""
    needs = list(spec.needs)
    if profile.device == "cuda" and "host" not in needs and "cuda" not in needs:
        needs.insert(0, "cuda")
    return tuple(needs)


def prerequisite_reason(spec: ExperimentSpec, profile: Profile, toolchain: Toolchain) -> Reason | None:
    for need in needs_for(spec, profile):
        reason = toolchain.reason_for(need, profile.device)
        if reason is not None:
            return reason
    return None


def _finish_status(record: Record) -> None:
    failed = [c for c in record.checks if c.fatal and not c.passed]
    if record.status == Status.OK and failed:
        _fail(record, Code.CHECK_FAILED, f"correctness check(s) failed: {', '.join(c.name for c in failed[:5])}")


def run_experiment(spec: ExperimentSpec, profile: Profile, toolchain: Toolchain, results: Results,
                   models: ModelCache, options: Any = None, record: Record | None = None,
                   capture: Capture | None = None, out_dir: Path | None = None) -> Record:
    """Run one experiment into `record` (a new one if None) and return it: OK, NOT_RUN or FAILED.

    An exception of the experiment, `SystemExit` included, is FAILED and the run goes on; a value the
    results schema refuses is removed and the record FAILED naming it. Ctrl-C (and `Stopped`) propagates
    with `record` holding what was measured so far and its duration. What libraries say meanwhile goes
    to `capture` (lab.run.librarylogs) and into the record."""
    record = record or Record(id=spec.id, title=spec.title, status=Status.OK.value, started_at=now_iso())
    start = time.perf_counter()
    collected = capture.begin() if capture is not None else None
    heartbeat.take_disturbed()  # (what an earlier caller's timings left uncounted is not this experiment's)
    try:
        try:
            reason = prerequisite_reason(spec, profile, toolchain)
            if reason is not None:
                raise NotRun(reason.code, reason.message, reason)
            module = experiment_module(spec)
            if module is None:
                raise NotRun(Code.NOT_IMPLEMENTED, f"this lab version ({__version__}) has no implementation of "
                                                f"{spec.id} yet: update the lab")
            ctx = Context(spec, profile, toolchain, record, results, models, options, out_dir)
            profiler_guard.experiment_started(spec.id)
            module.run(ctx)
        except NotRun as exc:
            record.status, record.reason = Status.NOT_RUN.value, exc.reason
        except profiler_guard.ProfilerResidue as exc:  # a timing refused: a failed fatal check naming the cause
            record.checks.append(Check(name="no timing after a profiler left its residue", passed=False,
                                       detail=str(exc), params={}, fatal=True))
            _failed(record, exc)
        except (Exception, SystemExit) as exc:
            _failed(record, exc)
    finally:
        if capture is not None and collected is not None:
            record.library_logs = capture.end(collected)  # what libraries said meanwhile (lab.run.librarylogs)
        record.duration_s = round(time.perf_counter() - start, 3)
        _record_disturbed(record, heartbeat.take_disturbed())
        _finish_status(record)
        _refuse_unrecordable(record)
        _refuse_misshapen_notes(record)
    return record


def _fail(record: Record, code: Code, message: str, error: dict[str, Any] | None = None) -> None:
    """The record FAILED for `code` (with the error's type, message and traceback, where there was one)."""
    record.status, record.reason = Status.FAILED.value, Reason(code, message)
    if error is not None:
        record.error = error


def _failed(record: Record, exc: BaseException) -> None:
    first = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, SystemExit):
        first = f"the experiment called sys.exit({exc.code!r}); an experiment raises instead"
    _fail(record, Code.EXCEPTION, f"{type(exc).__name__}: {first}", {
        "type": type(exc).__name__, "message": str(exc)[:2000],
        "traceback": "".join(traceback.format_exc().splitlines(keepends=True)[-25:])})


def _record_disturbed(record: Record, disturbed: dict[str, int]) -> None:
    """The console's writes that fell inside timed sections (lab.heartbeat), by section, as a note and a failed
    non-fatal check naming the timings whose samples may hold a write's cost."""
    if disturbed:
        record.notes[notes.CONSOLE_IN_TIMING.key] = {k: n for k, n in disturbed.items()}
        which = ", ".join(f"{section} ({n})" for section, n in disturbed.items())
        record.checks.append(Check(name="no console write inside a timing", passed=False, fatal=False, params={},
                                   detail=f"{out.plural(sum(disturbed.values()), 'write')} inside: {which}; a write costs the "
                                          f"timing it lands in about 0.2 ms at most (measured: lab.heartbeat)"[:400]))


def _refuse_unrecordable(record: Record) -> None:
    """What the results schema refuses (a tensor as a value, text in a numeric metric) is removed from the
    record, which becomes FAILED naming it: the experiment fails, the run and the file stay whole."""
    problems = quarantine(record)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        _fail(record, Code.EXCEPTION, f"a value could not be recorded: {problems[0]}{more}",
              {"type": "ResultsError", "message": "; ".join(problems)[:2000], "traceback": ""})


def _refuse_misshapen_notes(record: Record) -> None:
    """A declared note written into the record directly (not through Context.note) and not of its declared shape
    makes an OK record FAILED naming it; the note stays, for whoever reads the file."""
    problems = notes.problems(record.id, record.notes)
    if problems and record.status == Status.OK:
        _fail(record, Code.EXCEPTION, problems[0])


# ---------------------------------------------------------------------------- the run

def run(profile: Profile, out_dir: Path, only: list[str] | None = None, weights: str | None = None,
        argv: list[str] | None = None, on_record: Callable[[Record], None] | None = None,
        set_text: dict[str, dict[str, str]] | None = None, resume: bool = False, force: bool = False,
        verbose: bool = False, allow_source_change: bool = False,
        stop_after: run_budget.Budget | None = None) -> Results:
    """Run the profile's experiments (or `only` these) and write out_dir/results.json after each.

    `set_text` is `--set` as {experiment: {option: text}}. Every selected experiment's options are
    resolved before anything runs, so a bad value stops the run at once (OptionsError). The run
    directory is claimed first (lab.run.rundir): one run at a time, an existing run refused unless
    `resume` (keep its OK records, run the rest; refused when what is measured changed, the lab's source
    included unless `allow_source_change`) or `force` (move it aside). Every experiment asked
    for ends with a record, whatever stops the run (lab.run.runstate), except at `stop_after`'s budget:
    the run is then `stopped` and those not started have none (lab.run.budget). `verbose` shows library
    output live (it is recorded either way)."""
    from lab.step.model import resolve_weights

    default = list(profile.experiments) if profile.experiments else None
    specs = resolve(only or default, sweeps=profile.sweeps)
    options = resolve_all(specs, profile, set_text)
    provenance = resolve_weights(profile.model, weights)
    claim = rundir.claim(out_dir, resume=resume, force=force)
    try:
        with runstate.stop_signals_raise():  # SIGTERM, SIGHUP: recorded as Ctrl-C is
            previous, earlier = claim.previous, {}
            if previous is not None:
                specs = runstate.resume_selection(previous, profile.name, default, only, sweeps=profile.sweeps)
                earlier = {r.id: r for r in previous.experiments if r.started_at}  # attempted in an earlier start
                if stop_after is not None:  # what the experiments run again took there
                    stop_after.expected = run_budget.earlier_durations(list(earlier.values()))
                options = resolve_all(specs, profile, set_text)
            runsay.cleaned(clean_abandoned_tempdirs())
            if profile.threads:
                torch.set_num_threads(profile.threads)
            toolchain = probe()
            manifest = collect(weights=provenance, toolchain=toolchain)
            manifest["host"]["overloaded"] = runstate.host_overloaded(manifest)  # warned about at the start
            manifest["profile"] = profile.params()
            manifest["options"] = {spec.id: as_dict(options[spec.id]) for spec in specs}
            if previous is None:
                kept: dict[str, Record] = {}
                results = Results(run=RunInfo(profile=profile.name, started_at=now_iso(), argv=argv or [], only=only,
                                              starts=[runstate.new_start(argv or [])]),
                                  manifest=manifest, lab_version=__version__)
            else:
                results, kept = runstate.resumed(previous, specs, manifest, argv or [], allow_source_change)
            results.run.starts[-1].stop_after_s = stop_after.seconds if stop_after is not None else None
            if claim.manifest_only:  # resuming a run that saved no record: it must be the same run all the same
                runstate.check_same_measurement(rundir.saved_manifest(out_dir), manifest,
                                                allow_source_change)
            runstate.save_start(out_dir, ((MANIFEST_NAME, lambda: write_json_atomic(out_dir / MANIFEST_NAME,
                                                                                  results.manifest)),
                                          (RESULTS_NAME, lambda: save(results, out_dir))))
            _run_loop(specs, kept, profile, toolchain, results, ModelCache(profile, provenance), options, out_dir,
                      on_record, claim, verbose, stop_after, earlier)
        return results
    finally:
        claim.release()


def _run_loop(specs: list[ExperimentSpec], kept: dict[str, Record], profile: Profile, toolchain: Toolchain,
              results: Results, models: ModelCache, options: dict[str, Any], out_dir: Path,
              on_record: Callable[[Record], None] | None, claim: rundir.Claim, verbose: bool = False,
              stop_after: run_budget.Budget | None = None, earlier: dict[str, Record] | None = None) -> None:
    records = dict(kept)
    todo = [s for s in specs if s.id not in kept]
    wall_start = time.perf_counter() - (results.run.wall_s or 0.0)
    out.begin_run(verbose)
    runsay.start(profile, len(specs), out_dir, claim, runstate.load_warning(results.run.starts[-1]))
    if claim.previous is not None:
        runsay.resume(list(kept), len(todo))

    def save_now(state: RunState | None = None) -> None:
        results.experiments = runstate.in_order(specs, records)
        results.run.wall_s = round(time.perf_counter() - wall_start, 3)
        if state is not None:
            results.run.state, results.run.finished_at = state, now_iso()
        save(results, out_dir)

    current: Record | None = None
    stop = None
    capture = Capture(out_dir, echo=verbose).open()
    try:
        for i, spec in enumerate(todo, 1):
            if stop_after is not None:
                stop = stop_after.stop_before(spec.id, [s.id for s in todo[i - 1:]], i - 1)
                if stop is not None:  # those not started keep what an earlier start recorded of them, if anything
                    results.run.starts[-1].stop = stop
                    records.update({k: r for k, r in (earlier or {}).items() if k in stop.not_started})
                    save_now("stopped")
                    break
                runsay.too_long(stop_after.too_long_alone(spec.id) if i == 1 else None)
            out.experiment_started(i, len(todo), spec.id, spec.title)
            current = Record(id=spec.id, title=spec.title, status=Status.OK.value, started_at=now_iso())
            run_experiment(spec, profile, toolchain, results, models, options[spec.id], record=current,
                           capture=capture, out_dir=out_dir)
            records[spec.id], current = current, None
            try:
                save_now()
            except PermissionError:
                raise  # the fix depends on where the lab runs (lab.__main__ names it)
            except OSError as exc:  # a full disk: say which record is lost and how to measure it again
                saved = sum(1 for r in records.values() if r.id != spec.id)
                raise runstate.not_saved(out_dir / RESULTS_NAME, exc, out_dir, records[spec.id], saved) from None
            out.experiment_finished(records[spec.id])
            if on_record:
                on_record(records[spec.id])
    except BaseException as exc:  # Ctrl-C, SIGTERM/SIGHUP (runstate.Stopped), or an error of the runner itself
        why = runstate.why_stopped(exc)
        if current is not None:
            records[current.id] = runstate.interrupted(current, why, out_dir, started=True)
        for spec in todo:
            records.setdefault(spec.id, runstate.unreached(spec, why, out_dir))
        try:
            save_now("interrupted")
        except Exception:  # the error may be the results file itself (disk full): the original error is the news
            pass
        raise
    finally:
        out.experiment_ended()  # (the heartbeat says nothing more of an experiment the run stopped in)
        models.close()  # what an experiment kept open for a later one (lab.experiments.sentinel's processes)
        capture.close()
    if stop is not None:  # resumable: nothing of the run's end (the host's final load, the summary) yet
        runsay.stopped(stop)
        return
    finish(results.manifest, _clean_launch_us(results))  # the host's load at the end, the sentinel's launch cost
    write_json_atomic(out_dir / MANIFEST_NAME, results.manifest)
    save_now("complete")
    out.summary(results)
