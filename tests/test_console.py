"""The run as its user watches it: only the lab's own lines on the console, library output kept in the results,
progress for long stretches, each NOT_RUN reason once, a summary that names failed checks, `list --check`,
`decode` saying which weights it used."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from lab.contract import catalogue, profiles
from lab import console, heartbeat
from lab.run import librarylogs, runner
from lab.__main__ import build_parser, main
from lab.run.manifest import REPO_ROOT
from lab.contract.options import NoOptions
from lab.contract.reasons import Code
from lab.contract.results import Check, Reason, Record, Results, RunInfo, load

# Every line the lab's console writes starts like one of these (lab.console); anything else is a leak.
LAB_LINE = re.compile(r"^(lab run |\[\d+/\d+\] |    |done: )")
LONE = itertools.count()
USDT = b"USDT:2026-11-29 13:03:52 9417:9417 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def noisy_experiment(ctx) -> None:
    """A stand-in experiment that makes every kind of library noise the lab must keep off the console."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # the user's (here the experiment's) filters decide what is reported
        for _ in range(3):
            warnings.warn("TensorFloat32 tensor cores for float32 matrix multiplication available but not "
                          "enabled", UserWarning)
    logging.getLogger("torch._inductor.cudagraph_trees").warning("skipping cudagraphs due to mutated inputs "
                                                                 "(1 instances)")
    torch._logging.getArtifactLogger("torch._inductor.utils", "perf_hints").warning("a perf hint, off by default")
    torch._logging.set_logs(recompiles=True)  # torch makes new stream handlers: they must stay quiet too
    torch._logging.set_logs()
    logging.getLogger("torch._dynamo.convert_frame").warning("after set_logs")
    # no handler on its way: Python would print it through logging.lastResort (a new logger each time: pytest
    # attaches its capture handler to the loggers that do not propagate when a test starts)
    lone = logging.getLogger(f"a_library_without_handlers.{next(LONE)}")
    lone.propagate = False
    lone.warning("through logging.lastResort")
    for _ in range(2):
        os.write(2, USDT)
    print("a library printing to sys.stderr", file=sys.stderr)
    ctx.check("compile gives about 1.0x", False, detail="2.15x", fatal=False)


@pytest.fixture
def noisy(monkeypatch):
    """graph_breaks replaced by the noisy stand-in (in process)."""
    stand_in = types.ModuleType("lab.experiments.graph_breaks")
    stand_in.run, stand_in.Options = noisy_experiment, NoOptions
    monkeypatch.setitem(sys.modules, "lab.experiments.graph_breaks", stand_in)


def test_library_noise_is_recorded_not_printed(tmp_path: Path, noisy, capfd) -> None:
    res = runner.run(profiles.get("smoke"), tmp_path, only=["graph_breaks"])
    err = capfd.readouterr().err
    assert [ln for ln in err.splitlines() if ln and not LAB_LINE.match(ln)] == [], err
    for raw in ("TensorFloat32", "skipping cudagraphs", "USDT", "perf hint", "after set_logs", "lastResort",
                "printing to sys.stderr"):
        assert raw not in err
    logs = {(e.source, e.origin, e.message): e for e in res.record("graph_breaks").library_logs}
    tf32 = logs["warning", "UserWarning", "TensorFloat32 tensor cores for float32 matrix multiplication available "
                                          "but not enabled"]
    assert tf32.count == 3 and re.search(r"tests/test_console.py:\d+$", tf32.location), tf32
    assert logs["logging", "torch._inductor.cudagraph_trees",
                "skipping cudagraphs due to mutated inputs (1 instances)"].level == "WARNING"
    assert ("logging", "torch._inductor.utils.__perf_hints", "a perf hint, off by default") in logs
    assert ("logging", "torch._dynamo.convert_frame", "after set_logs") in logs  # once: torch's handler muted
    assert any(source == "logging" and origin.startswith("a_library_without_handlers.")
               and message == "through logging.lastResort" for source, origin, message in logs)
    usdt = logs["stderr", "stderr", "profiler_start"]
    assert (usdt.level, usdt.location, usdt.count) == ("USDT", "SyncActivityProfilerHandler.cpp:52", 2)
    assert ("stderr", "stderr", "a library printing to sys.stderr") in logs
    assert len(logs) == 7  # nothing recorded twice
    assert "library output recorded: 7 distinct messages, 10 in all; -v shows it live" in err
    saved = load(tmp_path).record("graph_breaks").library_logs
    assert [e.message for e in saved] == [e.message for e in res.record("graph_breaks").library_logs]
    assert not (tmp_path / librarylogs.STDERR_NAME).exists()
    assert logging.lastResort is not None and type(logging.lastResort).__module__ == "logging"


def test_verbose_shows_library_output_live(tmp_path: Path, noisy, capfd) -> None:
    runner.run(profiles.get("smoke"), tmp_path, only=["graph_breaks"], verbose=True)
    err = capfd.readouterr().err
    assert "      [warning] UserWarning: TensorFloat32 tensor cores" in err
    assert "      [logging] torch._inductor.cudagraph_trees: skipping cudagraphs due to mutated inputs" in err
    assert "      [stderr] fd 2: USDT:" in err
    assert "-v shows it live" not in err


def test_strict_turns_a_failed_check_into_exit_status_1(tmp_path: Path, noisy, capfd) -> None:
    args = ["run", "--profile", "smoke", "--only", "graph_breaks"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    out = capfd.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"{tmp_path / 'a' / 'results.json'}: 1 OK, 0 NOT_RUN, 0 FAILED, 1 failed check "
                              "(graph_breaks: compile gives about 1.0x) in ")
    assert main(args + ["--out", str(tmp_path / "b"), "--strict"]) == 1


def test_strict_is_0_when_nothing_failed(tmp_path: Path) -> None:
    assert main(["run", "--profile", "smoke", "--only", "toolchain", "--out", str(tmp_path), "--strict"]) == 0


def test_a_smoke_run_prints_only_the_labs_lines(tmp_path: Path) -> None:
    """ceilings runs the profiler (kineto writes USDT lines to fd 2), fixed_step_equivalence is long, two
    experiments are NOT_RUN for the same reason; the console shows progress, each reason once, the summary."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--out", str(out), "--only",
                           "ceilings,fixed_step_equivalence,cuda_graph_decode,graph_cost"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
                          env={**os.environ, "LAB_PROGRESS_EVERY_S": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr.splitlines()
    assert [ln for ln in err if not LAB_LINE.match(ln)] == [], proc.stderr
    res = load(out)
    if not torch.cuda.is_available():
        message = res.record("cuda_graph_decode").reason.message
        assert proc.stderr.count(message) == 1  # said once, for the first experiment it stops
        assert "    NOT_RUN in 0.0 s (no_cuda, as above)" in err
        assert "    NOT_RUN no_cuda x2: cuda_graph_decode, graph_cost" in err
    # the long experiment says how far it is: n of 13 greedy decodes, with an estimate of the rest
    steps = [ln for ln in err if ln.startswith("    fixed_step_equivalence: greedy decodes ")]
    assert any(re.search(r"greedy decodes 1/13, [\d.]+ s, about [\d.]+ (s|min)", ln) for ln in steps), steps
    assert steps[-1].startswith("    fixed_step_equivalence: greedy decodes 13/13, ") and steps[-1].endswith(": done")
    # what the profiler wrote is in the results, not on the console
    logs = res.record("ceilings").library_logs
    assert logs is not None and not any("USDT" in ln for ln in err)
    if any(e.level == "USDT" for e in logs):
        assert {e.message for e in logs if e.level == "USDT"} == {"profiler_start", "profiler_stop"}
    assert proc.stdout.splitlines()[-1].startswith(f"{out / 'results.json'}: ")


def test_summary_names_codes_failures_and_failed_checks() -> None:
    def rec(rid: str, status: str, code: str | None = None, checks=()) -> Record:
        return Record(id=rid, title=rid, status=status, reason=Reason(code, f"{code} sentence") if code else None,
                      checks=list(checks))

    res = Results(run=RunInfo(profile="smoke", started_at="", wall_s=12.5), manifest={"manifest_version": 1},
                  experiments=[rec("a", "NOT_RUN", Code.NO_CUDA), rec("b", "NOT_RUN", Code.NO_CUDA),
                               rec("c", "NOT_RUN", Code.NO_TRITON),
                               rec("d", "FAILED", Code.CHECK_FAILED, [Check("tokens equal", False, "at [0, 3]")]),
                               rec("e", "OK", None, [Check("about 1.0x", False, "2.15x", fatal=False),
                                                     Check("fine", True)])])
    buf = io.StringIO()
    console.use_stream(buf)
    try:
        console.summary(res)
    finally:
        console.use_stream(None)
    assert buf.getvalue().splitlines() == [
        "done: 1 OK, 3 NOT_RUN, 1 FAILED in 12.5 s",
        "    NOT_RUN no_cuda x2: a, b",
        "    NOT_RUN no_triton x1: c",
        "    FAILED d: check_failed: check_failed sentence",
        "    check failed: d: tokens equal (at [0, 3])",
        "    check failed: e: about 1.0x (2.15x)"]
    assert console.final_line(res, "r/results.json") == (
        "r/results.json: 1 OK, 3 NOT_RUN (no_cuda x2, no_triton x1), 1 FAILED, 2 failed checks "
        "(d: tokens equal; e: about 1.0x) in 12.5 s")
    assert console.strict_failure(res)


def test_each_not_run_reason_is_said_once_per_run() -> None:
    buf = io.StringIO()
    console.use_stream(buf)
    try:
        console.begin_run()
        for rid, code in (("a", Code.NO_CUDA), ("b", Code.NO_CUDA), ("c", Code.NO_TRITON), ("d", Code.NO_CUDA)):
            console.experiment_finished(Record(id=rid, title=rid, status="NOT_RUN", reason=Reason(code, f"fix {code}")))
    finally:
        console.use_stream(None)
    assert buf.getvalue().splitlines() == [
        "    NOT_RUN in 0.0 s (no_cuda: fix no_cuda)", "    NOT_RUN in 0.0 s (no_cuda, as above)",
        "    NOT_RUN in 0.0 s (no_triton: fix no_triton)", "    NOT_RUN in 0.0 s (no_cuda, as above)"]


def test_progress_counts_items_and_activities_report_their_time(monkeypatch) -> None:
    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "0")
    buf = io.StringIO()
    console.use_stream(buf)
    try:
        console.begin_run()
        console.STATE.experiment = "exp"
        assert list(console.track(range(3), "items")) == [0, 1, 2]
        with console.activity("compiling step (first call)"):
            pass
        with pytest.raises(RuntimeError), console.activity("capturing graph"):
            raise RuntimeError("x")
    finally:
        console.use_stream(None)
    lines = buf.getvalue().splitlines()
    assert re.fullmatch(r"    exp: items 1/3, [\d.]+ s, about [\d.]+ s left", lines[0]), lines
    assert re.fullmatch(r"    exp: items 2/3, [\d.]+ s, about [\d.]+ s left", lines[1]), lines
    assert re.fullmatch(r"    exp: items 3/3, [\d.]+ s: done", lines[2]), lines
    assert lines[3] == "    exp: compiling step (first call) ..."
    assert re.fullmatch(r"    exp: compiling step \(first call\): done in [\d.]+ s", lines[4]), lines
    assert lines[5] == "    exp: capturing graph ..."
    assert re.fullmatch(r"    exp: capturing graph: stopped after [\d.]+ s", lines[6]), lines


def test_stderr_lines_are_parsed_without_their_timestamps() -> None:
    text = ("USDT:2026-11-29 13:03:52 9417:9417 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
            "[W1129 13:03:52.512063306 ProcessGroupNCCL.cpp:4561] Warning: a c10 warning\n"
            "W1129 13:03:52.123000 1234 torch/_dynamo/convert_frame.py:964] [0/8] hit the recompile limit\n"
            "\nplain line\n  continued\n")
    assert librarylogs.parse_stderr(text) == [
        ("USDT", "SyncActivityProfilerHandler.cpp:52", "profiler_start"),
        ("W", "ProcessGroupNCCL.cpp:4561", "Warning: a c10 warning"),
        ("W", "torch/_dynamo/convert_frame.py:964", "[0/8] hit the recompile limit"),
        ("", "", "plain line\n  continued")]


# ---------------------------------------------------------------------------- lab list --check

def _check_table(profile: str | None, capsys) -> dict[str, str]:
    assert main(["list", "--check"] + ([profile] if profile else [])) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {}
    for ln in out:
        m = re.match(r"^(\w+)\s+needs=(\S+)\s+.*\[(runs here|NOT_RUN \w+|not in profile [\w-]+)\]$", ln)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    assert set(rows) == {s.id for s in catalogue.CATALOGUE}, out
    return rows, out


def test_list_check_on_this_host_follows_the_prerequisites(capsys) -> None:
    from lab.host.toolchain import probe

    tc = probe()
    default = "gpu" if torch.cuda.is_available() else "cpu"
    rows, out = _check_table(None, capsys)  # no profile: the one `run` picks here
    assert out[0].startswith(f"profile {default} ")
    chosen = profiles.get(default)
    selected = {s.id for s in catalogue.resolve(list(chosen.experiments or []) or None, sweeps=chosen.sweeps)}
    for spec in catalogue.CATALOGUE:
        needs, verdict = rows[spec.id]
        if spec.id not in selected:
            assert verdict == f"not in profile {default}", spec.id
        elif default == "cpu":
            expect = None
            for need in spec.needs:
                expect = expect or tc.reason_for(need, "cpu")
            assert verdict == ("runs here" if expect is None else f"NOT_RUN {expect.code}"), spec.id
            assert needs == (",".join(spec.needs) or "-")
            if not spec.needs:
                assert verdict == "runs here", spec.id  # needs=- never NOT_RUN with the host's own profile
    blocked = [v for _, v in rows.values() if v.startswith("NOT_RUN ")]
    for verdict in set(blocked):  # what would make them run: one line per reason
        assert any(re.match(rf"^{blocked.count(verdict)} {verdict}: .+", ln) for ln in out), out


def test_list_check_gpu_without_cuda_shows_the_need_it_judges(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    rows, out = _check_table("gpu", capsys)
    gpu = profiles.get("gpu")
    selected = {s.id for s in catalogue.resolve(list(gpu.experiments or []) or None, sweeps=gpu.sweeps)}
    for spec in catalogue.CATALOGUE:
        needs, verdict = rows[spec.id]
        if spec.id not in selected:
            assert verdict == "not in profile gpu", spec.id
        elif "host" in spec.needs:
            assert (needs, verdict) == ("host", "runs here")
        else:
            assert verdict == "NOT_RUN no_cuda", spec.id
        if "host" not in spec.needs:
            assert needs.split(",")[0] in ("cuda", "cuda*") and needs != "-", spec.id
    host = sum("host" in catalogue.BY_ID[e].needs for e in selected)
    assert out[-1].startswith(f"{len(selected) - host} NOT_RUN no_cuda: no CUDA device")
    assert "* the gpu profile runs on CUDA" in "\n".join(out)


def test_list_check_counts_only_what_the_profile_runs(tmp_path: Path, capsys, monkeypatch) -> None:
    """`list --check cpu` says 'N of the profile's M would run here' with M what `run --profile cpu` selects and N
    what it then runs; the experiments it leaves out are shown as not in the profile, never as runnable."""
    profile = profiles.get("cpu")
    selected = catalogue.resolve(list(profile.experiments or []) or None, sweeps=profile.sweeps)
    assert len(selected) < len(catalogue.CATALOGUE)  # (the cpu profile leaves some out)
    rows, out = _check_table("cpu", capsys)
    outside = [eid for eid, (_, verdict) in rows.items() if verdict == "not in profile cpu"]
    assert sorted(outside) == sorted({s.id for s in catalogue.CATALOGUE} - {s.id for s in selected})
    runs = [eid for eid, (_, verdict) in rows.items() if verdict == "runs here"]
    assert set(runs) <= {s.id for s in selected}
    assert f"{len(runs)} of the profile's {len(selected)} would run here ({len(outside)} more not in profile cpu)" \
        in out
    ran = []  # what the runner, judging the same prerequisites, then runs
    monkeypatch.setattr(runner, "run_experiment", lambda spec, *args, **kwargs: ran.append(spec.id) or
                        Record(id=spec.id, title=spec.title, status="OK"))
    monkeypatch.setattr(runner, "prerequisite_reason", lambda spec, *args: (
        None if spec.id in runs else Reason(Code.NO_CUDA, "judged as list --check judged it")))
    runner.run(profile, tmp_path / "run")
    assert sorted(ran) == sorted(s.id for s in selected)


def test_list_check_unknown_profile_is_one_line(capsys) -> None:
    assert main(["list", "--check", "nope"]) == 2
    from lab.contract.profiles import PROFILES

    assert capsys.readouterr().err.strip() == f"error: unknown profile 'nope' (choose from {', '.join(PROFILES)})"


# ---------------------------------------------------------------------------- lab decode

def test_decode_says_which_weights_on_stderr(tmp_path: Path, capfd) -> None:
    assert main(["decode", "--profile", "smoke", "--prompt", "1,2,3", "--steps", "4"]) == 0
    got = capfd.readouterr()
    assert len(got.out.split()) == 4
    assert got.err.strip() == ("decode: fixed step on cpu; weights: random (gpt2-tiny, seed 0, init std 0.3; the "
                               "tokens mean nothing as text: --weights DIR uses a checkpoint)")
    from lab.step import model as M
    from lab.contract.profiles import TINY

    M.build_model(TINY, M.resolve_weights(TINY, "random")).save_pretrained(tmp_path / "ckpt")
    capfd.readouterr()
    assert main(["decode", "--profile", "smoke", "--prompt", "1,2,3", "--steps", "2", "--method", "reference",
                 "--weights", str(tmp_path / "ckpt"), "--json"]) == 0
    got = capfd.readouterr()
    assert json.loads(got.out)["weights"] == "local"
    assert got.err.strip() == (f"decode: reference step on cpu; weights: the checkpoint {(tmp_path / 'ckpt').resolve()} "
                               "(gpt2-tiny)")


@pytest.mark.parametrize("command", ["decode", "run", "list"])
def test_every_option_has_help(command: str) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for action in sub.choices[command]._actions:
        assert action.help, f"{command} {action.option_strings or action.dest} has no help text"


def test_handlers_torch_makes_during_a_run_write_to_stderr_after_it(tmp_path: Path, capfd) -> None:
    """torch._logging.set_logs inside an experiment makes stream handlers on the run's sys.stderr (its file):
    after the run they write to the real stderr, not to a closed file."""
    with librarylogs.Capture(tmp_path) as cap, cap.experiment():
        torch._logging.set_logs(recompiles=True)
        torch._logging.set_logs()
    logging.getLogger("torch._dynamo").warning("after the run")
    err = capfd.readouterr().err
    assert "after the run" in err and "Logging error" not in err


def test_the_run_page_lists_library_output(tmp_path: Path, noisy) -> None:
    from report.site.build import render_site

    runner.run(profiles.get("smoke"), tmp_path / "run", only=["graph_breaks"])
    site = render_site([tmp_path / "run"], tmp_path / "site")
    html = "\n".join(p.read_text() for p in (tmp_path / "site").rglob("*.html"))
    assert "library output: 7 message(s)" in html
    assert "skipping cudagraphs due to mutated inputs (1 instances)" in html and "profiler_start" in html
    assert site.index.exists()


def test_counts_take_the_number_of_their_noun() -> None:
    from lab.console import plural

    assert [plural(1, "compile"), plural(2, "graph"), plural(0, "graph")] == ["1 compile", "2 graphs", "0 graphs"]


# ---------------------------------------------------------------------------- the heartbeat

class FakeClock:
    """Seconds that pass only when a stand-in works, half a second at a time, the heartbeat beating at each
    (its thread beats too, by the same clock)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        for _ in range(int(seconds * 2)):
            self.t += 0.5
            console.beat()


class Stamped(io.StringIO):
    """The console's stream, each line kept with the clock's time when it was written."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock, self.lines = clock, []

    def write(self, text: str) -> int:
        self.lines += [(self.clock(), ln) for ln in text.splitlines()]
        return super().write(text)


def _slow_and_quiet(clock: FakeClock):
    """A stand-in with the silences the lab had: work that says nothing (ceilings: 135 s), a long activity
    (inductor's eager reference: 32 s), counted items slower than the interval (fixed_step_equivalence)."""
    from lab.measure.timing import HostClock, time_methods

    def run(ctx) -> None:
        time_methods({"eager": lambda: clock.advance(35)}, HostClock(), rounds=1, iters=1, warmup=0)
        with ctx.activity("computing the eager reference"):
            clock.advance(32)
        for _ in ctx.track(range(3), "greedy decodes"):
            clock.advance(25)
    return run


@pytest.mark.slow  # (the run's toolchain probe: about 10 s here)
def test_every_experiment_of_the_smoke_profile_says_something_every_interval(tmp_path: Path,
                                                                           monkeypatch) -> None:
    """Each smoke experiment (a stand-in with the real ones' silences, its prerequisites taken as met) run by the
    runner with a clock that advances: no gap between two console lines longer than LAB_PROGRESS_EVERY_S."""
    import importlib

    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "10")
    clock = FakeClock()
    profile = profiles.get("smoke")
    specs = catalogue.resolve(list(profile.experiments or []) or None, sweeps=profile.sweeps)
    real = {spec.module: importlib.import_module(spec.module) for spec in specs}
    for name, module in real.items():  # the module as it is (its Options and what they name), `run` a stand-in
        stand_in = types.ModuleType(name)
        stand_in.__dict__.update(vars(module))
        stand_in.run = _slow_and_quiet(clock)
        monkeypatch.setitem(sys.modules, name, stand_in)
    monkeypatch.setattr(runner, "prerequisite_reason", lambda *args: None)
    stream = Stamped(clock)
    monkeypatch.setattr(librarylogs.Capture, "open", lambda self: self)  # the console's stream stays `stream`
    monkeypatch.setattr(librarylogs.Capture, "close", lambda self: None)
    monkeypatch.setattr(librarylogs.Capture, "begin", lambda self: None)
    console.use_stream(stream)
    heartbeat.use_clock(clock)
    try:
        res = runner.run(profile, tmp_path / "run")
    finally:
        heartbeat.use_clock(None)
        console.use_stream(None)
    assert [r.status for r in res.experiments] == ["OK"] * len(specs)
    for rec in res.experiments:  # the 35 s timed call kept its promise with three lines, each counted against it
        assert rec.notes["console_writes_in_timing"] == {"eager in round 1": 3}, rec.id
        failed = [c.detail for c in rec.checks if not c.passed and not c.fatal]
        assert len(failed) == 1 and failed[0].startswith("3 writes inside: eager in round 1 (3); "), rec.id
    starts = [i for i, (_, ln) in enumerate(stream.lines) if re.match(r"^\[\d+/\d+\] ", ln)]
    assert len(starts) == len(specs)
    for first, end in zip(starts, starts[1:] + [len(stream.lines)]):
        lines = stream.lines[first:end]
        gaps = [b[0] - a[0] for a, b in zip(lines, lines[1:])]
        experiment = lines[0][1].split()[1].rstrip(":")
        assert max(gaps) <= 10, (experiment, max(gaps), lines)
        said = [ln for _, ln in lines]
        # what is under way: where the quiet work is, the activity, the counted items
        assert f"    {experiment}: still running, 10.0 s (in lab.measure.timing.time_calls)" in said, said
        assert any(re.fullmatch(rf"    {experiment}: computing the eager reference, [\d.]+ s", ln) for ln in said)
        assert f"    {experiment}: computing the eager reference: done in 32.0 s" in said, said
        assert any(ln.startswith(f"    {experiment}: greedy decodes 1/3, ") for ln in said), said


def test_the_heartbeat_thread_speaks_for_a_quiet_experiment(monkeypatch) -> None:
    """Real time: an experiment that says nothing gets a 'still running' line from the thread (at 1 s, the
    heartbeat's shortest interval), and none once it has ended."""
    import time

    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "0")
    buf = io.StringIO()
    console.use_stream(buf)
    try:
        console.begin_run()
        console.experiment_started(1, 1, "quiet", "says nothing")
        for _ in range(300):
            if "still running" in buf.getvalue():
                break
            time.sleep(0.1)
        console.experiment_ended()
        said = buf.getvalue().splitlines()
    finally:
        console.use_stream(None)
    assert said[0] == "[1/1] quiet: says nothing"
    assert re.fullmatch(r"    quiet: still running, [\d.]+ s( \(in [\w.]+\))?", said[1]), said
    assert not console.BOARD.busy()


@pytest.fixture
def watched(monkeypatch):
    """An experiment under way with a stamped stream and a fake clock (interval 10 s); yields (clock, stream)."""
    monkeypatch.setenv("LAB_PROGRESS_EVERY_S", "10")
    clock = FakeClock()
    stream = Stamped(clock)
    console.use_stream(stream)
    heartbeat.use_clock(clock)
    try:
        console.begin_run()
        console.experiment_started(1, 1, "timed", "times something")
        yield clock, stream
    finally:
        console.experiment_ended()
        heartbeat.use_clock(None)
        console.use_stream(None)
        heartbeat.take_disturbed()


def test_the_heartbeat_waits_for_the_gap_after_a_timing_shorter_than_the_promise(watched) -> None:
    """Quiet work (6 s), then a timing of 8 s: without the timing the heartbeat would speak at 10 s, inside it; it
    speaks at the timing's edges instead (after half the interval), and nothing is counted."""
    from lab.measure.timing import HostClock, time_calls

    clock, stream = watched
    start = clock()
    clock.advance(6)
    time_calls(lambda: clock.advance(8), 1, HostClock())
    said = [(t - start, ln) for t, ln in stream.lines]
    assert [t for t, _ in said] == [0, 6, 14], said
    assert said[1][1].startswith("    timed: still running, 6.0 s"), said
    assert said[2][1].startswith("    timed: still running, 14.0 s"), said
    assert heartbeat.take_disturbed() == {}


def test_the_heartbeat_writes_inside_a_timing_once_the_promise_would_break_and_counts_it(watched) -> None:
    """A method's turn of 25 s in rotating rounds (a timed call inside it): lines at 10 and 20 s inside, counted
    against the turn; at its end (5 s quiet) the gap's line, not counted."""
    from lab.measure.timing import HostClock, rotating_rounds, time_calls

    clock, stream = watched
    start = clock()

    def step() -> None:
        clock.advance(25)

    rotating_rounds({"eager": lambda: time_calls(step, 1, HostClock())}, rounds=1)
    assert [t - start for t, _ in stream.lines] == [0, 10, 20, 25], stream.lines
    assert "(in lab.measure.timing.time_calls)" in stream.lines[1][1]
    assert heartbeat.take_disturbed() == {"eager in round 1": 2}


def test_a_long_loop_of_short_calls_hears_the_heartbeat_only_between_its_samples(watched) -> None:
    """A turn of 200 calls of half a second each (100 s of samples, as a loaded host stretches a loop of short
    steps): the promise is kept (no silence over 10 s) by lines in the gaps between stretches of samples, so nothing
    is counted against the turn, and every call is still one sample."""
    from lab.measure.timing import HostClock, rotating_rounds, time_calls

    clock, stream = watched
    start = clock()

    def step() -> None:
        clock.advance(0.5)

    got = rotating_rounds({"eager": lambda: time_calls(step, 200, HostClock(now=clock))}, rounds=1)
    assert got["eager"] == [[pytest.approx(500.0)] * 200]
    times = [start] + [t for t, _ in stream.lines] + [clock()]
    assert max(b - a for a, b in zip(times, times[1:])) <= 10, stream.lines
    assert len(stream.lines) >= 100 // 10
    assert heartbeat.take_disturbed() == {}


def test_a_write_in_a_turns_untimed_warm_up_is_not_counted(watched) -> None:
    """A turn whose time_calls spends 25 s in its untimed warm-up (a recompile, say) and 1 s sampling: the heartbeat
    keeps its promise inside the turn (lines at 10 and 20 s), but no sample was taken meanwhile, so nothing is
    counted; a write while sampling still is."""
    from lab.measure.timing import HostClock, rotating_rounds, time_calls

    clock, stream = watched
    start = clock()
    durations = iter([25.0, 1.0])
    rotating_rounds({"growing compile": lambda: time_calls(lambda: clock.advance(next(durations)), 1, HostClock(),
                                                           warmup=1)}, rounds=1)
    assert [t - start for t, _ in stream.lines][:3] == [0, 10, 20], stream.lines
    assert heartbeat.take_disturbed() == {}


def test_writes_inside_a_timing_reach_the_experiments_record(watched, monkeypatch) -> None:
    """The runner puts the count in the record: a note by section and a failed check that is not fatal."""
    from lab.contract.catalogue import BY_ID
    from lab.measure.timing import HostClock, time_calls
    import lab.experiments.recompiles as stand_in

    clock, _ = watched

    def quiet_step() -> None:
        clock.advance(12)

    monkeypatch.setattr(stand_in, "run", lambda ctx: time_calls(quiet_step, 1, HostClock()))
    monkeypatch.setattr(runner, "prerequisite_reason", lambda *args: None)
    spec = BY_ID["recompiles"]
    record = runner.run_experiment(spec, profiles.get("smoke"), None, types.SimpleNamespace(experiments=[]), None)
    assert record.status == "OK"
    assert record.notes["console_writes_in_timing"] == {"timing quiet_step": 1}
    (check,) = record.checks
    assert (check.name, check.passed, check.fatal) == ("no console write inside a timing", False, False)
    assert check.detail.startswith("1 write inside: timing quiet_step (1); a write costs")

    monkeypatch.setattr(stand_in, "run", lambda ctx: time_calls(lambda: clock.advance(4), 1, HostClock()))
    record = runner.run_experiment(spec, profiles.get("smoke"), None, types.SimpleNamespace(experiments=[]), None)
    assert "console_writes_in_timing" not in record.notes and record.checks == []


def test_the_live_display_has_no_refresh_thread_and_redraws_only_in_gaps(monkeypatch, watched) -> None:
    """On a terminal rich's display is redrawn by the heartbeat, not by a thread of its own: inside a timing it is
    not redrawn until the promise would break (that redraw counted), at the timing's edge it is."""
    from rich.live import _RefreshThread

    from lab.measure.timing import HostClock, time_calls

    clock, stream = watched
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(console.console, "_force_terminal", True)
    drawn: list[float] = []
    monkeypatch.setattr(console._Display, "refresh", lambda self: (drawn.append(clock()), heartbeat.shown()))
    with console.counter("items", 3) as steps:
        assert console.BOARD.live()
        assert not any(isinstance(t, _RefreshThread) for t in __import__("threading").enumerate())
        clock.advance(1)  # outside a timing: redrawn every half second
        assert drawn and drawn[-1] - drawn[0] >= 0.5
        entered = clock()

        def quiet_step() -> None:
            clock.advance(8)
            assert [t for t in drawn if t > entered] == []  # nothing inside the first 8 s
            clock.advance(4)

        time_calls(quiet_step, 1, HostClock())
        inside = [t - entered for t in drawn if entered < t < clock()]
        assert len(inside) == 1 and inside[0] >= 10 - 0.5, inside  # the promise's redraw (the edge's at 0.5 s)
        assert drawn[-1] == clock()  # the gap after the timing
        steps.advance()
    assert heartbeat.take_disturbed() == {"timing quiet_step": 1}
