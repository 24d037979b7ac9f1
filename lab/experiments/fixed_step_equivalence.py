"""fixed_step_equivalence: the fixed-shape step decodes exactly what transformers' greedy generate does.

Checked in fp32 on the profile's device: batch 1 and a batch of different prompts equal the
reference token for token; garbage written into every unreached cache slot changes nothing; each
sequence decoded in a batch equals the same sequence decoded alone. Every compared sequence must
contain many distinct tokens, or equality would prove nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lab.step import decode
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.options import option
from lab.experiments.common.sweep import prompt_for
from lab.console import Steps
from lab.run.context import Context
from lab.step.model import Weights

MIN_DISTINCT_FRACTION = 0.3  # of the generated tokens, per sequence


@dataclass(frozen=True)
class Options:
    steps: int = option(24, "greedy tokens decoded per sequence", minimum=1)
    # Kept small so that the fp32 check is about the step, not about how many near-tied argmaxes a big
    # batch happens to contain (see ModelSpec.init_std).
    batch: int = option(4, "sequences in the batch of different prompts", minimum=1)


def prompts(ctx: Context[Options], batch: int, seed: int) -> torch.Tensor:
    return prompt_for(ctx.profile.model.vocab_size, batch, ctx.profile.prompt_len, torch.device("cpu"), seed)


def _distinct_ok(ctx: Context[Options], name: str, tokens: torch.Tensor) -> None:
    counts = [len(set(row.tolist())) for row in tokens]
    need = max(2, int(MIN_DISTINCT_FRACTION * tokens.shape[1]))
    ctx.metric(M.DISTINCT_TOKENS_MIN, min(counts), case=name)
    ctx.check(f"{name}: every sequence has >= {need} distinct tokens", min(counts) >= need,
              detail=f"distinct per sequence: {counts}")


def _equal(ctx: Context[Options], name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    same = torch.equal(got, want)
    first_diff = None
    if not same and got.shape == want.shape:
        diff = (got != want).nonzero()
        first_diff = diff[0].tolist() if len(diff) else None
    ctx.metric(M.TOKENS_EQUAL, same, case=name)
    ctx.check(f"{name}: tokens equal", same, detail="" if same else f"first difference at [seq, step] {first_diff}")


@torch.no_grad()
def run(ctx: Context[Options]) -> None:
    steps = ctx.options.steps
    model, w = ctx.gpt2("float32")
    max_len = ctx.profile.prompt_len + steps + 8
    batch = ctx.options.batch  # a batch of different prompts
    # 2 prompt sets x (reference, fixed, growing), clean + garbage, together + each sequence alone
    with ctx.counter("greedy decodes", 2 * 3 + 2 + 1 + batch) as done:
        _run(ctx, model, w, steps, max_len, batch, done)
    ctx.note(N.FIXED_STEPS.key, steps)
    ctx.note(N.FIXED_BATCH.key, batch)


def _run(ctx: Context[Options], model: Any, w: Weights, steps: int, max_len: int, batch: int, done: Steps) -> None:
    # 1. batch 1 and a batch of different prompts against transformers' greedy generate
    for name, p in (("batch1", prompts(ctx, 1, 10)), (f"batch{batch}", prompts(ctx, batch, 11))):
        ref = decode.generate_reference(model, p, steps)
        done.advance()
        fixed = decode.generate_fixed(w, p, steps, max_len=max_len)
        done.advance()
        _distinct_ok(ctx, name, ref)
        _equal(ctx, f"{name} fixed vs reference", fixed, ref)
        grow = decode.generate_growing(w, p, steps)
        done.advance()
        _equal(ctx, f"{name} growing vs reference", grow, ref)

    # 2. garbage in every unreached cache slot changes nothing
    p = prompts(ctx, batch, 12).to(ctx.device)
    clean = decode.generate_fixed(w, p, steps, max_len=max_len)
    done.advance()
    state = decode.new_state(w, batch, max_len)
    g = torch.Generator(device=ctx.device).manual_seed(3)
    for cache in state.caches:
        cache.copy_(torch.randn(cache.shape, generator=g, device=ctx.device) * 1e4)
    decode.prefill(state, w, p)  # overwrites slots [0, T) only
    T = p.shape[1]
    for _ in range(steps - 1):
        decode.decode_step(state, w)
    done.advance()
    garbage = state.out[:, T:T + steps].cpu()
    _distinct_ok(ctx, "garbage", clean)
    _equal(ctx, "garbage in unreached slots", garbage, clean)
    ctx.metric(M.GARBAGE_SCALE, 1e4, case="garbage in unreached slots")

    # 3. each sequence decoded in a batch equals the same sequence decoded alone
    together = decode.generate_fixed(w, p, steps, max_len=max_len)
    done.advance()
    alone = []
    for i in range(batch):
        alone.append(decode.generate_fixed(w, p[i:i + 1], steps, max_len=max_len))
        done.advance()
    _equal(ctx, "batch independence", together, torch.cat(alone))
