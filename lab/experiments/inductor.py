"""inductor: Inductor on the indexed fixed-shape step and on the split step.

Chapter 000 found that the indexed step (cache written with `index_copy_` at a device-side
position) did not compile on its machine: the linker failed on the bounds check of indexed
loads and stores. So this experiment first tries the indexed step as it is and, when that fails,
records the exact error and compiles each indexed operation of the step on its own to name the
smallest one that fails. Then it compiles the split step (`decode_core` compiled, the indexed
bookkeeping eager, the cache write a full-buffer `where`), checks that the split step equals the
indexed step and that its core is one graph with no breaks, and times eager against compiled
over interleaved rounds. Correctness (logits and tokens) is checked outside the timed loops.

Works on the profile's device: C++ kernels on the CPU, Triton kernels on CUDA (timed with CUDA
events through ctx.clock). Compiled by hand, not through the method table: the compile's failure and the split
step's compiled core are what is measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from lab.step import decode
from lab.contract import metrics as M
from lab.run.childproc import last_error_line
from lab.measure.dynamo_tools import explain, quiet_dynamo
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common import hostspeed
from lab.experiments.common.sweep import prompt_for
from lab.measure.timing import first_call, time_calls
from lab.run.context import Context

SPLIT_TOLERANCE = 1e-5  # eager split step vs eager indexed step: the same arithmetic, reordered writes only
COMPILED_TOLERANCE = 1e-3  # compiled vs eager, relative to the largest |logit|: fusion reorders float32 sums


@dataclass(frozen=True)
class Options:
    steps: int = option(40, "decode steps compared with the eager reference", minimum=1)
    equiv_steps: int = option(15, "steps over which the eager split step must equal the indexed step", minimum=1)
    batch: int = option(1, "sequences decoded together", minimum=1)
    steps_per_round: int | None = option(None, "timed steps per round (default: the profile's decode_steps)",
                                         profile="decode_steps", minimum=1)
    rounds: int | None = option(None, "timing rounds, methods in rotating order (default: the profile's rounds)",
                                profile="rounds", minimum=1)
    warmup: int | None = option(None, "untimed calls before each round (default: the profile's warmup)",
                                profile="warmup")


# ---------------------------------------------------------------------------- bisecting a failed compile

@dataclass
class OpCase:
    """One indexed operation of the step, as a small function and its arguments."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]


def op_cases(state: decode.DecodeState, w: Any) -> list[OpCase]:
    """The indexed and position-dependent operations of `decode_step`, smallest first."""
    pos, slots = state.pos.clone(), state.slots
    kv = state.caches[0].clone()  # [2, B, H, max_len, dh]
    new = torch.randn(2, kv.shape[1], kv.shape[2], 1, kv.shape[4], dtype=kv.dtype, device=kv.device)
    out = state.out.clone()
    tok = state.tok.clone()
    scores = torch.randn(kv.shape[1], kv.shape[2], 1, kv.shape[3], dtype=kv.dtype, device=kv.device)

    def position_advance(p: torch.Tensor) -> torch.Tensor:
        return p.add_(1)

    def slot_mask(s: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return s > p

    def token_embedding(t: torch.Tensor, wte: torch.Tensor) -> torch.Tensor:
        return F.embedding(t, wte)

    def position_embedding(wpe: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return wpe.index_select(0, p)

    def masked_softmax(sc: torch.Tensor, s: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return torch.softmax(sc.masked_fill(s > p, float("-inf")), dim=-1)

    def cache_write(cache: torch.Tensor, p: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        cache[:, :, :, p] = src  # as decode_step writes K and V at the device-side position
        return cache

    def token_write(o: torch.Tensor, p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return o.index_copy_(1, p + 1, logits.argmax(-1, keepdim=True))

    logits = torch.randn(out.shape[0], w.wte.shape[0], dtype=w.dtype, device=w.device)
    return [
        OpCase("add_ (position advance)", position_advance, (pos,)),
        OpCase("slots > pos (mask)", slot_mask, (slots, pos)),
        OpCase("embedding (token)", token_embedding, (tok, w.wte)),
        OpCase("index_select (position embedding)", position_embedding, (w.wpe, pos)),
        OpCase("masked_fill + softmax (attention mask)", masked_softmax, (scores, slots, pos)),
        OpCase("index_put_ (cache write at pos)", cache_write, (kv, pos, new)),
        OpCase("argmax + index_copy_ (token write)", token_write, (out, pos, logits)),
    ]


def error_text(exc: BaseException) -> dict[str, str]:
    """The exact error, its most telling line, and the type (for the record's notes)."""
    message = str(exc)
    return {"type": type(exc).__name__, "line": last_error_line(message) or message.splitlines()[0] if message else "",
            "message": message[:3000]}


def default_compile_call(case: OpCase) -> Any:
    torch._dynamo.reset()
    return torch.compile(case.fn, fullgraph=True)(*case.args)


def bisect(cases: list[OpCase], compile_call: Callable[[OpCase], Any] = default_compile_call) -> list[dict[str, Any]]:
    """Compile and run each case on its own; the failing ones, smallest first, name what breaks."""
    found = []
    for case in cases:
        try:
            compile_call(case)
            found.append({"op": case.name, "compiles": True})
        except Exception as exc:  # the compile error is the measurement
            found.append({"op": case.name, "compiles": False, **error_text(exc)})
    return found


# ---------------------------------------------------------------------------- decoding helpers

def decode_logits(step: Callable[[decode.DecodeState, Any], torch.Tensor], w: Any, prompt: torch.Tensor, steps: int,
                  max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [steps, B, V], tokens [B, steps]) of `steps` calls of `step` after a prefill."""
    state = decode.prefilled(w, prompt.to(w.device), max_len)
    logits = [step(state, w).detach().float().clone() for _ in range(steps)]
    T = prompt.shape[1]
    return torch.stack(logits).cpu(), state.out[:, T + 1:T + 1 + steps].cpu()


def compare(ctx: Context[Options], step_name: str, got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor],
            tolerance: float, fatal: bool, relative: bool = True) -> None:
    diff = float((got[0] - want[0]).abs().max())
    scale = float(want[0].abs().max()) or 1.0
    rel = diff / scale
    same = torch.equal(got[1], want[1])
    agree = float((got[1] == want[1]).float().mean())
    n = int(got[0].shape[0])
    ctx.metrics({M.MAX_LOGIT_DIFF: diff, M.TOKENS_EQUAL: same, M.TOKEN_AGREEMENT: agree, M.MAX_LOGIT_REL_DIFF: rel},
                step=step_name, steps=n)
    # Random weights at init_std 0.3 give logits in the hundreds: an absolute tolerance would say
    # more about the weights than about the compiler, so the compiled check is relative.
    value = diff if relative is False else rel
    ctx.check(f"{step_name}: max logit difference < {tolerance:g}{'' if relative is False else ' of max |logit|'}",
              value < tolerance, detail=f"abs {diff:.3g}, rel {rel:.3g}", fatal=fatal)
    ctx.check(f"{step_name}: tokens equal", same, detail=f"agreement {agree:.3f}", fatal=fatal)


# ---------------------------------------------------------------------------- the experiment

@torch.no_grad()
def run(ctx: Context[Options]) -> None:
    o = ctx.options
    steps, equiv_steps, batch = o.steps, o.equiv_steps, o.batch
    per_round, rounds, warmup = o.steps_per_round, o.rounds, o.warmup
    _, w = ctx.gpt2()
    T = ctx.profile.prompt_len
    max_len = max(ctx.profile.max_len, T + max(steps, warmup + per_round) + 2)
    prompt = prompt_for(ctx.profile.model.vocab_size, batch, T, ctx.device, 20)
    ctx.note(N.SETTINGS.key, {P.STEPS: steps, "equiv_steps": equiv_steps, P.BATCH: batch, "steps_per_round": per_round,
                          "rounds": rounds, "warmup": warmup, P.MAX_LEN: max_len, P.DTYPE: str(w.dtype),
                          "threads": torch.get_num_threads(), "device": str(ctx.device),
                          # other work on the host makes CPU timings noisy: say how busy it was
                          "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None})
    torch._dynamo.reset()

    # 1. the eager reference, and the split step equal to it (same arithmetic, cache written by `where`)
    ctx.progress("eager reference")
    reference = decode_logits(decode.decode_step, w, prompt, steps, max_len)
    split_eager = decode_logits(decode.decode_step_split, w, prompt, equiv_steps, max_len)
    compare(ctx, "split eager vs indexed eager", split_eager,
            (reference[0][:equiv_steps], reference[1][:, :equiv_steps]), SPLIT_TOLERANCE, fatal=True,
            relative=False)

    # 2. the core is one graph with no breaks (counted by Dynamo, no compiler involved)
    state = decode.prefilled(w, prompt.to(w.device), max_len)
    pos = state.pos
    x = F.embedding(state.tok, w.wte) + w.wpe.index_select(0, pos)
    ex = explain(decode.decode_core, x, state.slots == pos, state.slots > pos,
                 tuple(c.clone() for c in state.caches), w)
    ctx.metrics({M.DYNAMO_GRAPHS: ex.graphs, M.GRAPH_BREAKS: ex.breaks}, function="decode_core")
    ctx.check("decode_core is one graph with no breaks", ex.graphs == 1 and ex.breaks == 0,
              detail=f"{ex.graphs} graph(s), {ex.breaks} break(s)" + (f": {ex.reasons[0]}" if ex.reasons else ""))
    torch._dynamo.reset()

    # (method, which step) -> the step function timed
    methods: dict[tuple[Method, str], Callable[[decode.DecodeState, Any], torch.Tensor]] = {
        (Method.EAGER, "indexed"): decode.decode_step,
        (Method.EAGER, "split"): decode.decode_step_split,
    }

    # 3. the indexed step as it is
    compiled_step = torch.compile(decode.decode_step)
    state = decode.prefilled(w, prompt.to(w.device), max_len)
    try:
        with quiet_dynamo(), ctx.activity("compiling the indexed step (first call)"):
            _, setup = first_call(compiled_step, state, w, device=ctx.device)
    except Exception as exc:  # the failure is the finding: record it exactly, then bisect
        err = error_text(exc)
        ctx.metric(M.STEP_COMPILES, False, step="indexed")
        ctx.note(N.INDEXED_ERROR.key, err)
        ctx.progress(f"indexed step did not compile ({err['line'][:120]}); bisecting")
        found = bisect(op_cases(state, w))
        ctx.note(N.BISECT.key, found)
        failing = [f["op"] for f in found if not f["compiles"]]
        ctx.note(N.SMALLEST_FAILING.key, failing)
        for f in found:
            ctx.metric(M.OP_COMPILES, f["compiles"], op=f["op"])
        ctx.skip(f"{Method.COMPILE_DEFAULT}, indexed step", Code.COMPILE_FAILED,
                 f"the indexed step does not compile here ({err['line'][:200]}); failing ops: "
                 f"{', '.join(failing) or 'none on their own'}: the split step below is measured instead")
        torch._dynamo.reset()
    else:
        ctx.metric(M.STEP_COMPILES, True, step="indexed")
        ctx.metric(M.SETUP_S, setup, method=Method.COMPILE_DEFAULT, step="indexed")
        compare(ctx, "compiled indexed vs eager", decode_logits(compiled_step, w, prompt, steps, max_len),
                reference, COMPILED_TOLERANCE, fatal=False)
        methods[Method.COMPILE_DEFAULT, "indexed"] = compiled_step

    # 4. the split step: core compiled, bookkeeping eager
    core = torch.compile(decode.decode_core)

    def compiled_split(s: decode.DecodeState, ww: Any) -> torch.Tensor:
        return decode.decode_step_split(s, ww, core=core)

    state = decode.prefilled(w, prompt.to(w.device), max_len)
    with quiet_dynamo(), ctx.activity("compiling the split step's core (first call)"):
        _, setup = first_call(compiled_split, state, w, device=ctx.device)
    ctx.metric(M.STEP_COMPILES, True, step="split")
    ctx.metric(M.SETUP_S, setup, method=Method.COMPILE_DEFAULT, step="split")
    compare(ctx, "compiled split vs eager", decode_logits(compiled_split, w, prompt, steps, max_len), reference,
            COMPILED_TOLERANCE, fatal=False)
    methods[Method.COMPILE_DEFAULT, "split"] = compiled_split

    # 5. steady step time, methods in rotating order; the state is restored before every round
    state = decode.prefilled(w, prompt.to(w.device), max_len)
    saved = state.snapshot()

    def timer(step: Callable[[decode.DecodeState, Any], torch.Tensor]) -> Callable[[], list[float]]:
        def once() -> list[float]:
            state.restore(saved)
            return time_calls(lambda: step(state, w), per_round, ctx.clock, warmup=warmup)
        return once

    ctx.progress(f"timing {len(methods)} methods, {rounds} rounds of {per_round} steps")
    turns: hostspeed.Turns = {f"{m} {s}": ({P.METHOD: m, P.STEP: s, P.BATCH: batch}, timer(step))
                              for (m, s), step in methods.items()}
    samples = hostspeed.timed(ctx, turns, rounds, {P.BATCH: batch}, f"b{batch}")
    for step_name in ("indexed", "split"):
        if f"{Method.COMPILE_DEFAULT} {step_name}" in samples:
            ctx.speedup(M.SPEEDUP_VS_EAGER, samples[f"{Method.EAGER} {step_name}"][0],
                        samples[f"{Method.COMPILE_DEFAULT} {step_name}"][0], method=Method.COMPILE_DEFAULT,
                        step=step_name, batch=batch)
