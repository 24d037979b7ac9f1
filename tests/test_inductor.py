"""The inductor experiment's parts, and Inductor with the compiler hidden going through the real runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lab.step import decode
from lab.contract import profiles
from lab.run import runner
from lab.measure.dynamo_tools import explain
from lab.experiments.inductor import bisect, decode_logits, op_cases
from lab.run.manifest import REPO_ROOT
from lab.step.model import build_model, extract_weights, resolve_weights
from lab.host.toolchain import HostView, probe, probe_cxx

IDS = ["toolchain", "inductor", "compile_cost"]


@pytest.fixture(scope="module")
def tiny():
    spec = profiles.TINY
    return extract_weights(build_model(spec, resolve_weights(spec, None)))


@torch.no_grad()
def test_split_step_equals_indexed_step(tiny) -> None:
    prompt = torch.randint(0, profiles.TINY.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    ref = decode_logits(decode.decode_step, tiny, prompt, 15, 32)
    split = decode_logits(decode.decode_step_split, tiny, prompt, 15, 32)
    assert float((ref[0] - split[0]).abs().max()) < 1e-5
    assert torch.equal(ref[1], split[1]) and len(set(ref[1][0].tolist())) > 3


@torch.no_grad()
def test_core_is_one_graph_without_breaks(tiny) -> None:
    state = decode.new_state(tiny, 1, 32)
    decode.prefill(state, tiny, torch.arange(8)[None])
    pos = state.pos
    x = F.embedding(state.tok, tiny.wte) + tiny.wpe.index_select(0, pos)
    ex = explain(decode.decode_core, x, state.slots == pos, state.slots > pos, state.caches, tiny)
    assert (ex.graphs, ex.breaks) == (1, 0)


@torch.no_grad()
def test_bisect_names_the_failing_ops(tiny) -> None:
    state = decode.new_state(tiny, 1, 32)
    decode.prefill(state, tiny, torch.arange(8)[None])
    cases = op_cases(state, tiny)

    def fake_compile(case) -> None:  # a backend that cannot link indexed stores, as on the chapter's machine
        if "index_copy_" in case.name or "index_put_" in case.name:
            raise RuntimeError("linker failed\nLINK : error LNK2019: unresolved external symbol aoti_torch_check")
        case.fn(*case.args)

    found = bisect(cases, fake_compile)
    failing = [f for f in found if not f["compiles"]]
    assert [f["op"] for f in failing] == ["index_put_ (cache write at pos)", "argmax + index_copy_ (token write)"]
    assert "aoti_torch_check" in failing[0]["line"] and failing[0]["type"] == "RuntimeError"
    assert len(found) == len(cases) >= 6


def _records(results_path: Path) -> dict[str, dict]:
    data = json.loads(results_path.read_text())
    return {r["id"]: r for r in data["experiments"]}


@pytest.mark.slow
def test_hidden_compiler_through_the_cli(tmp_path: Path) -> None:
    """PATH without any compiler, CXX unset: the items come back NOT_RUN with the probe's code, not crashes."""
    empty = tmp_path / "bin"
    empty.mkdir()
    expected = probe_cxx(HostView.make(path=str(empty), environ={}, root="/",
                                       python_include=HostView.current().python_include))
    from lab.host.toolchain import Toolchain, CudaInfo, TritonInfo

    code = Toolchain("x", CudaInfo(False), TritonInfo(False), expected).cxx_reason().code
    assert code in ("compiler_not_on_path", "no_cxx_compiler")
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    env.update(PATH=str(empty), PYTHONPATH=str(REPO_ROOT))
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--profile", "smoke", "--only", ",".join(IDS),
                           "--out", str(out)], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = _records(out / "results.json")
    assert recs["toolchain"]["status"] == "OK"
    for exp in ("inductor", "compile_cost"):
        assert recs[exp]["status"] == "NOT_RUN", recs[exp]
        assert recs[exp]["reason"]["code"] == code
        assert "PATH" in recs[exp]["reason"]["message"] or "install" in recs[exp]["reason"]["message"]
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else None
    if manifest is not None:
        assert manifest["toolchain"]["cxx"]["compiler"] is None


@pytest.mark.parametrize("hide", ["compiler", "headers"])
def test_hidden_toolchain_through_the_runner(tmp_path: Path, monkeypatch, hide: str) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "inc").mkdir()
    real = HostView.current()
    view = HostView.make(path=str(tmp_path / "bin") if hide == "compiler" else real.path, environ={},
                         root=str(tmp_path / "root"),
                         python_include=real.python_include if hide == "compiler" else str(tmp_path / "inc"))
    if hide == "headers" and probe_cxx(view).compiler is None:
        pytest.skip("no C++ compiler on this host to pair with hidden headers")
    monkeypatch.setattr(runner, "probe", lambda: probe(view))
    results = runner.run(profiles.get("smoke"), tmp_path / "run", only=IDS)
    recs = {r.id: r for r in results.experiments}
    want = "no_cxx_compiler" if hide == "compiler" else "no_python_headers"
    assert recs["toolchain"].status == "OK"
    assert recs["toolchain"].notes["reason.cpp"]["code"] == want
    for exp in ("inductor", "compile_cost"):
        assert recs[exp].status == "NOT_RUN" and recs[exp].reason.code == want
