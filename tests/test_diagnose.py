"""`lab diagnose`: target loading, the verdict rule on fed numbers, and the three examples' verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import cli, one_line_error

from lab.measure.diagnose import Check, diagnose, load_target, verdict
from lab.contract.intervals import Interval
from lab.host.toolchain import probe


def _checks(host=None, kern=None, brk="ok", rec="ok", steady="ok"):
    return [Check(1, "host", host[0] if host else "needs_cuda", "", host[1] if host else {"us_per_op": 50.0, "ops": 5}),
            Check(2, "kernels", "ok", "", kern or {"eager": 10, "compiled": 10, "matmul_share": 0.1}),
            Check(3, "breaks", brk, "", {"graph_breaks": 2, "reasons": ["Tensor.item()"]}),
            Check(4, "recompiles", rec, "", {"recompiles": 3}), Check(5, "steady", steady, "", {})]


def test_verdict_order_and_kinds() -> None:
    assert verdict(_checks(brk="finding", rec="finding"), 1.0, "cpu")[0] == "graph-broken"
    assert verdict(_checks(rec="finding"), 1.0, "cpu")[0] == "recompiling"
    gemm = {"eager": 6, "compiled": 6, "matmul_share": 0.9}
    fused = {"eager": 8, "compiled": 6, "matmul_share": 0.9}
    assert verdict(_checks(kern=gemm), 1.02, "cpu")[0] == "gemm-bound"
    # beyond what removing all non-GEMM time allows, with fewer ops: fusion; with none fused, never fusion
    assert verdict(_checks(kern=fused), 2.0, "cpu")[0] == "fusion"
    kind, text = verdict(_checks(kern=gemm), 2.0, "cpu")
    assert kind == "gemm-bound" and "not fusion: compile kept ops 6 → 6" in text
    # CI's 2-core host, steady rounds, six GEMMs left as six: 1.21x [1.18, 1.24] at 97% in matrix products
    kind, text = verdict(_checks(kern={"eager": 6, "compiled": 6, "matmul_share": 0.97}), 1.21, "cpu",
                         Interval(1.18, 1.24))
    assert kind == "gemm-bound" and "the host's speed between rounds" in text
    # within the rounds' noise of what fusion could give (1.1 / 0.9 = 1.22): still GEMM-bound; wholly beyond: not
    kind, text = verdict(_checks(kern=fused), 1.3, "cpu", Interval(1.05, 1.5))
    assert kind == "gemm-bound" and "compile 1.30× [1.05, 1.5]" in text and "not fusion" not in text
    assert verdict(_checks(kern=fused), 1.3, "cpu", Interval(1.25, 1.4))[0] == "fusion"
    # fusion needs fewer ops: a speedup with the same count is no fusion
    assert verdict(_checks(kern={"eager": 10, "compiled": 4, "matmul_share": 0.1}), 2.0, "cpu")[0] == "fusion"
    kind, text = verdict(_checks(kern={"eager": 10, "compiled": 10, "matmul_share": 0.1}), 2.0, "cpu")
    assert kind == "no-overhead" and "compile kept ops 10 → 10" in text
    host = ("finding", {"host_share": 0.82, "self_cpu_ms": 3.0, "self_device_ms": 0.5})
    kind, text = verdict(_checks(host=host, kern={"eager": 640, "compiled": 110, "matmul_share": 0.3}), 2.5, "cuda")
    assert kind == "launch-bound" and "82% of step time is host" in text and "640 → 110" in text
    assert verdict(_checks(host=("needs_cuda", {"us_per_op": 3.0, "ops": 40})), 4.0, "cpu")[0] == "dispatch-bound"
    assert verdict(_checks(), 1.0, "cpu")[0] == "no-overhead"


def test_load_target_errors_name_the_target() -> None:
    for bad, match in (("nocolon", "module:function"), ("no_such_mod_xyz:f", "cannot import"),
                       ("lab.examples.targets:nope", "no function")):
        with pytest.raises(ValueError, match=match):
            load_target(bad, "cpu")
    fn, args = load_target("lab.examples.targets:elementwise_chain", "cpu")
    assert callable(fn) and args[0].shape == (1, 256)


def _inductor() -> str | None:
    r = probe().reason_for("inductor", "cpu")
    return f"{r.code}: {r.message}" if r else None


@pytest.mark.parametrize("target,expected", [
    pytest.param("breaks_every_call", {"graph-broken"}, marks=pytest.mark.slow),
    pytest.param("gemm_stack", {"gemm-bound"}, marks=pytest.mark.slow),
    ("elementwise_chain", {"dispatch-bound", "fusion"}),
])
def test_example_verdicts(target: str, expected: set[str]) -> None:
    fn, args = load_target(f"lab.examples.targets:{target}", "cpu")
    d = diagnose(fn, args, "cpu", target=target, inductor_reason=_inductor(), rounds=2, iters=5)
    assert [c.number for c in d.checks] == [1, 2, 3, 4, 5]
    assert d.check(1).status == "needs_cuda"  # the CPU says which check needs CUDA
    assert d.verdict in expected, d.render()
    if target == "breaks_every_call":
        assert d.check(3).data["graph_breaks"] >= 1 and d.check(3).data["reasons"]
    if target == "elementwise_chain" and d.compiled_ms is not None:
        assert d.check(2).data["compiled"] < d.check(2).data["eager"]


@pytest.mark.slow
def test_cli_one_line_error() -> None:
    out = subprocess.run([sys.executable, "-m", "lab", "diagnose", "not_a_target"], capture_output=True, text=True)
    assert out.returncode == 2 and "module:function" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_cli_renders_five_checks_and_verdict() -> None:
    out = subprocess.run([sys.executable, "-m", "lab", "diagnose", "lab.examples.targets:breaks_every_call",
                          "--device", "cpu", "--no-compile", "--rounds", "1", "--iters", "3"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for n in range(1, 6):
        assert f"  {n}. " in out.stdout
    assert "verdict: graph-broken" in out.stdout and "needs CUDA" in out.stdout


_calls = [0]


def _counts_calls(x):
    _calls[0] += 1  # a Python value Dynamo guards on: it changes every call
    return x + _calls[0]


def test_recompile_check_finds_changing_python_values() -> None:
    import torch

    from lab.measure.diagnose import _recompiles

    c = _recompiles(_counts_calls, (torch.ones(3),), calls=4)
    assert c.status == "finding" and c.data["recompiles"] >= 1 and c.data["reasons"]
    ok = _recompiles(lambda x: x * 2, (torch.ones(3),), calls=4)
    assert ok.status == "ok" and ok.data["recompiles"] == 0


# ---------------------------------------------------------------------------- targets a user will write

USER_TARGETS = '''
import os, sys, time
import torch

def takes_args(a, b):
    return (lambda x: x + 1), (torch.ones(2),)

def exits():
    def step(x):
        raise SystemExit(3)
    return step, (torch.ones(2),)

def returns_text():
    return (lambda x: "done"), (torch.ones(2),)

def returns_none():
    return (lambda x: None), (torch.ones(2),)

def bare_inputs():
    return (lambda x: x + 1), torch.ones(2)

def too_many_inputs():
    return (lambda x: x + 1), (torch.ones(2), torch.ones(2))

def three_things():
    return (lambda x: x), (torch.ones(2),), "extra"

def sleeps():
    def step(x):
        time.sleep(3600)
    return step, (torch.ones(2),)

def leaves_a_child_and_odd_bytes():
    import subprocess
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    os.write(1, b"\\xff\\xfe not UTF-8\\n")
    return (lambda x: x * 2 + 1), (torch.ones(8),)

def prints_like_a_profiler():
    def step(x):
        os.write(2, b"USDT: fake profiler_start line\\n")
        return x * 2 + 1
    return step, (torch.ones(8),)
'''


@pytest.fixture
def user_targets(tmp_path, monkeypatch):
    (tmp_path / "user_targets.py").write_text(USER_TARGETS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_targets"
    sys.modules.pop("user_targets", None)


@pytest.mark.parametrize("name,match", [
    ("takes_args", r"takes_args\(\) takes a, b, but diagnose calls it with no arguments"),
    ("bare_inputs", r"example_inputs a tuple of positional arguments, got a Tensor \(for one argument write \(x,\)\)"),
    ("too_many_inputs", r"the callable cannot take the 2 example input\(s\)"),
    ("three_things", r"got a tuple of 3 items"),
])
def test_a_malformed_target_is_one_error_naming_what_is_wrong(user_targets, name, match) -> None:
    with pytest.raises(ValueError, match=match):
        load_target(f"{user_targets}:{name}", "cpu")


@pytest.mark.parametrize("name", ["returns_text", "returns_none"])
def test_a_callable_without_a_tensor_result_is_refused_before_any_verdict(user_targets, name) -> None:
    fn, args = load_target(f"{user_targets}:{name}", "cpu")
    with pytest.raises(ValueError, match=r"returned (str|None), not a tensor"):
        diagnose(fn, args, "cpu", target=name, compile=False, rounds=1, iters=1)


def test_verdicts_come_only_from_valid_measurements() -> None:
    no_graph = _checks(brk="finding")
    no_graph[2].data["graph_breaks"] = -1  # what explain says when it captured nothing
    assert verdict(no_graph, None, "cpu")[0] != "graph-broken"
    no_ops = _checks(host=("needs_cuda", {"us_per_op": 0.0, "ops": 0}))
    assert verdict(no_ops, None, "cpu")[0] != "dispatch-bound"


def test_a_target_that_exits_is_one_line_not_a_silent_exit(user_targets, capsys) -> None:
    err = one_line_error(capsys, "diagnose", f"{user_targets}:exits", "--no-compile", "--rounds", "1", "--iters", "1")
    assert "called sys.exit(3)" in err and "user_targets.py:10" in err


def test_a_stuck_target_is_stopped_by_the_timeout(user_targets, capsys) -> None:
    err = one_line_error(capsys, "diagnose", f"{user_targets}:sleeps", "--no-compile", "--timeout", "2")
    assert "no diagnosis after --timeout 2 s: the target was stopped" in err


def test_the_timeout_has_a_default() -> None:
    from lab.commands.diagnose import DEFAULT_TIMEOUT_S
    from lab.__main__ import build_parser

    assert build_parser().parse_args(["diagnose", "m:f"]).timeout == DEFAULT_TIMEOUT_S > 0


def test_ctrl_c_says_nothing_is_kept_not_that_results_are_saved(capsys, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("lab.run.childproc.run_child", interrupted)
    rc, err = cli(capsys, "diagnose", "lab.examples.targets:gemm_stack", "--no-compile")
    assert rc == 130 and "saved" not in err and "keeps no results" in err


@pytest.mark.slow
def test_library_lines_stay_off_the_console_and_json_keeps_them(user_targets, capfd) -> None:
    from lab.__main__ import main

    rc = main(["diagnose", f"{user_targets}:prints_like_a_profiler", "--no-compile", "--rounds", "1", "--iters", "2",
               "--json"])
    out, err = capfd.readouterr()
    assert rc == 0 and "USDT" not in err
    assert any("USDT: fake profiler_start line" in ln for ln in json.loads(out)["library_output"])


def test_a_target_that_leaves_a_child_and_odd_bytes_gets_its_diagnosis(user_targets, capfd) -> None:
    """Issue 30, B8, B9: a target leaving `sleep 300` behind made diagnose wait out --timeout and discard the
    finished diagnosis; bytes that are not UTF-8 on its stdout failed it ('utf-8' codec can't decode)."""
    from lab.__main__ import main

    rc = main(["diagnose", f"{user_targets}:leaves_a_child_and_odd_bytes", "--no-compile", "--rounds", "1",
               "--iters", "1", "--timeout", "300", "--json"])
    out, err = capfd.readouterr()
    assert rc == 0 and json.loads(out)["target"] == f"{user_targets}:leaves_a_child_and_odd_bytes", err


@pytest.mark.slow
def test_diagnose_names_the_target_that_raised(tmp_path: Path, capsys, monkeypatch) -> None:
    """Problem 10: a callable that raised printed only `error: <message>`, no target."""
    (tmp_path / "my_workload.py").write_text(
        "import torch\n\n"
        "def step(x):\n"
        "    raise ValueError('shapes do not line up')\n\n"
        "def make():\n"
        "    return step, (torch.ones(3),)\n\n"
        "def make_fails():\n"
        "    raise RuntimeError('no data here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = one_line_error(capsys, "diagnose", "my_workload:make", "--no-compile", "--rounds", "1", "--iters", "1")
    assert "TARGET my_workload:make" in err and "ValueError: shapes do not line up" in err
    assert f"{tmp_path / 'my_workload.py'}:4" in err
    err = one_line_error(capsys, "diagnose", "my_workload:make_fails", "--no-compile")
    assert "TARGET my_workload:make_fails" in err and "RuntimeError: no data here" in err
