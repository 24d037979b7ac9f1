"""lab/experiments/data_dependent_branch.py: the EOS rewrite gives the host-checked tokens; the capture child answers without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lab.step import decode
from lab.experiments import data_dependent_branch as ddb


def test_eos_rewrite_gives_the_host_checked_tokens(tiny) -> None:
    _, w = tiny
    prompt = torch.tensor([[5, 6, 7], [8, 9, 10]])
    plain = decode.generate_fixed(w, prompt, 16)
    eos = int(plain[0, 5])
    outs = {}
    for version, step in ddb.STEPS.items():
        state = ddb.new_eos_state(w, 2, 32, eos)
        decode.prefill(state, w, prompt)
        state.done.copy_(state.tok == state.eos)  # as the experiment starts a run: the prefill's token counts too
        with torch.no_grad():
            for _ in range(15):
                step(state, w)
        outs[version] = state.out.clone()
    assert torch.equal(outs[ddb.HOST], outs[ddb.WHERE])
    row0 = outs[ddb.WHERE][0, 3:]
    first = int((row0 == eos).nonzero()[0])
    assert (row0[first:16] == eos).all()  # once finished, the row keeps emitting EOS (16 tokens generated)
    assert ddb._stopped_at(torch.tensor([[0, 1, 9, 9], [0, 9, 9, 9]]), 1, 9) == 2
    assert ddb._stopped_at(torch.tensor([[0, 1, 2]]), 1, 9) is None


def test_capture_child_answers_without_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the gpu-sweep run exercises the capture")
    out = ddb.capture_child(model={}, provenance={}, batch=1, max_len=8, prompt_len=2,
                            result_path=str(tmp_path / "r.json"))
    assert out == {"captured": False, "error": "no CUDA device in the child"}
    assert (tmp_path / "r.json").is_file()
