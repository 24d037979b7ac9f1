"""lab/step/teacher.py: teacher forcing judges each step against the reference, not the divergence after it."""

from __future__ import annotations

import pytest
import torch

from lab.step import methods as stepmethods, teacher
from lab.contract.names import Method
from lab.step.methods import MethodSpec
from lab.measure.timing import HostClock

from step_helpers import seeded_prompt, bad_feedback_step


def test_teacher_forcing_judges_each_step_not_the_divergence(tiny) -> None:
    _, w = tiny
    prompt = seeded_prompt()
    ref = teacher.reference(w, prompt, 40, 12)
    assert ref.tokens.shape == (12, 2, 1) and ref.logits.shape == (12, 2, 512) and ref.start_pos == 8
    same = teacher.teacher_forced(stepmethods.build(Method.EAGER, w, prompt, 40), ref)
    assert (same.agreement, same.max_logit_error, same.first_disagreement) == (1.0, 0.0, None)
    bad = stepmethods.build(MethodSpec("bad-feedback", step=bad_feedback_step), w, prompt, 40)
    bad.decode(12, HostClock(), readback=False)  # free-running: its tokens part from eager's at once
    assert not torch.equal(bad.tokens()[:, 9:20], ref.argmax.T[:, :11])
    forced = teacher.teacher_forced(bad, ref)  # fed eager's tokens, every step's logits are eager's
    assert (forced.agreement, forced.max_logit_error) == (1.0, 0.0)
    from lab.step.model import extract_weights

    low = extract_weights(tiny[0], dtype=torch.bfloat16)
    bf16 = teacher.teacher_forced(stepmethods.build(Method.EAGER, low, prompt, 40), ref)
    assert 0.0 < bf16.max_logit_error < 0.1 * float(ref.logits.abs().max())  # bf16 rounding, not a wrong model
    with pytest.raises(ValueError, match="another prompt"):
        teacher.teacher_forced(stepmethods.build(Method.EAGER, w, seeded_prompt(length=7), 40), ref)
