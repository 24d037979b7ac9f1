"""Teacher forcing: a step method fed the reference's tokens, its logits compared with the reference's.

Free-running greedy decoding compares whole sequences. With random weights many steps have
near-ties between the two largest logits; once a method whose arithmetic differs (bf16, or fp32
summed in another order) picks the other token, the two sequences see different contexts and
every later token may differ. So free-running agreement with random weights measures divergence
after near-ties, not error (11.6% for bf16 compile + capture on the H200, where every step was
within bf16 rounding). Teacher forcing removes the divergence: before every step the method's
input token is overwritten with the one the fp32 eager reference was fed at that step, so both see
the same tokens (each with its own cache, computed by its own arithmetic), and each step's logits
are compared with the reference's: the share of steps whose argmax agrees, and the largest absolute
logit error.

`reference(w32, prompt, max_len, steps)` runs fp32 eager once and keeps each step's input token and
logits (on the device: steps x batch x vocab fp32, 26 MB at batch 1 for GPT-2); `teacher_forced(m,
ref)` drives any built `lab.step.methods.StepMethod` (eager, replayed graph, compiled, fused) through
the same steps. The check is outside every timed path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.step import decode
from lab.step.methods import StepMethod
from lab.step.model import Weights


@dataclass
class Reference:
    """The fp32 eager reference of a teacher-forced comparison."""

    prompt: torch.Tensor  # [B, T]
    start_pos: int  # the position of the first decode step (T)
    tokens: torch.Tensor  # [steps, B, 1] the input token of each step
    logits: torch.Tensor  # [steps, B, V] fp32
    argmax: torch.Tensor  # [steps, B]

    @property
    def steps(self) -> int:
        return int(self.tokens.shape[0])


@dataclass
class Forced:
    """How far a method's logits were from the reference's, step by step, under the same input tokens."""

    agreement: float  # share of (step, batch row) pairs whose argmax equals the reference's
    max_logit_error: float  # largest |logit - reference logit|
    steps: int
    first_disagreement: int | None  # the first step whose argmax differed in any row (None: none did)


@torch.no_grad()
def reference(w32: Weights, prompt: torch.Tensor, max_len: int, steps: int) -> Reference:
    """Greedy fp32 eager from `prompt`: each step's input token and logits."""
    state = decode.prefilled(w32, prompt, max_len)
    start = int(state.pos.item())
    if start + steps >= max_len:
        raise ValueError(f"teacher forcing: {steps} steps after a {start}-token prompt do not fit {max_len} slots")
    tokens, logits = [], []
    for _ in range(steps):
        tokens.append(state.tok.clone())
        logits.append(decode.decode_step(state, w32).float().clone())
    stacked = torch.stack(logits)
    return Reference(prompt, start, torch.stack(tokens), stacked, stacked.argmax(-1))


@torch.no_grad()
def teacher_forced(m: StepMethod, ref: Reference) -> Forced:
    """Run the built method `m` (a StepMethod) over the reference's steps, feeding it the reference's tokens."""
    if not torch.equal(m.prompt.cpu(), ref.prompt.cpu()):
        raise ValueError(f"teacher forcing {m.name}: the method was built for another prompt")
    m.start()  # its own prefill (its own weights and cache), position = the prompt's length
    if int(m.state.pos.item()) != ref.start_pos:
        raise ValueError(f"teacher forcing {m.name}: position {int(m.state.pos.item())} after the prefill, "
                         f"the reference's is {ref.start_pos}")
    agree = torch.zeros((), dtype=torch.long, device=ref.logits.device)
    err = torch.zeros((), dtype=torch.float32, device=ref.logits.device)
    per_step = []
    for i in range(ref.steps):
        m.state.tok.copy_(ref.tokens[i])  # the reference's input token, in place (a graph reads this buffer)
        logits = m.call().float()
        same = logits.argmax(-1) == ref.argmax[i]
        per_step.append(same.all())
        agree += same.sum()
        err = torch.maximum(err, (logits - ref.logits[i]).abs().max())
    rows = ref.steps * int(ref.tokens.shape[1])
    ok = torch.stack(per_step).cpu()
    first = None if bool(ok.all()) else int((~ok).nonzero()[0, 0])
    return Forced(agreement=float(agree.item()) / rows, max_logit_error=float(err.item()), steps=ref.steps,
                  first_disagreement=first)
