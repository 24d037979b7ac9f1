"""graph_cost: what a captured graph costs — warm-up + capture time, break-even steps, memory.

Per batch: a fresh state is prefilled and captured (`GraphedStep`); the saving per step is eager's
median minus replay's (taken from this run's cuda_graph_decode when present, else measured here
with the same method); break-even = capture time / saving. Memory: the state and cache buffers,
and what the graph's private pool reserved beyond them.
"""

from __future__ import annotations

import torch

from lab.step import decode, methods as stepmethods
from lab.contract import metrics as M
from lab.experiments.common.sweep import prompt_for
from lab.measure.breakeven import break_even_calls
from lab.step.graphs import GraphedStep
from lab.contract.names import Experiment, Method
from lab.contract.options import NoOptions
from lab.contract import query
from lab.measure.timing import flat, rotating_rounds
from lab.run.context import Context

Options = NoOptions  # no knobs: the profile's batches, warm-up and steps

MIB = 1024 * 1024


def _step_ms_from_run(ctx: Context[Options], method: Method, batch: int) -> float | None:
    rec = query.ok(ctx.results.experiments, Experiment.CUDA_GRAPH_DECODE)
    try:
        return None if rec is None else float(
            rec.metric(M.STEP_MS.name, method=method, batch=batch, dtype="float32", readback=False).value)
    except KeyError:
        return None


def run(ctx: Context[Options]) -> None:
    prof = ctx.profile
    _, w = ctx.gpt2("float32")
    for batch in prof.batches:
        prompt = prompt_for(prof.model.vocab_size, batch, prof.prompt_len, ctx.device, 2000 + batch)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        alloc0 = torch.cuda.memory_allocated()
        state = decode.new_state(w, batch, prof.max_len)
        state_bytes = torch.cuda.memory_allocated() - alloc0
        decode.prefill(state, w, prompt)
        graphed = GraphedStep(decode.decode_step, state, w, warmup=prof.warmup)
        ctx.metrics({M.CAPTURE_S: round(graphed.capture_s, 4), M.WARMUP_S: round(graphed.warmup_s, 4),
                     M.CAPTURE_ONLY_S: round(graphed.capture_only_s, 4), M.STATE_MIB: round(state.nbytes() / MIB, 3),
                     M.STATE_ALLOCATED_MIB: round(state_bytes / MIB, 3),
                     M.GRAPH_POOL_MIB: round(graphed.pool_bytes / MIB, 3), M.WEIGHTS_MIB: round(w.nbytes() / MIB, 3)},
                    batch=batch)
        eager_ms = _step_ms_from_run(ctx, Method.EAGER, batch)
        graph_ms = _step_ms_from_run(ctx, Method.GRAPH, batch)
        source: str = Experiment.CUDA_GRAPH_DECODE
        if eager_ms is None or graph_ms is None:
            source = "measured here"
            eager = stepmethods.build(Method.EAGER, w, prompt, prof.max_len)
            replay = stepmethods.StepMethod(Method.GRAPH, state, w, prompt, call=graphed.replay, graphed=graphed)
            steps = min(prof.decode_steps, prof.max_len - prof.prompt_len - 2)
            samples = rotating_rounds({Method.EAGER: lambda: eager.decode(steps, ctx.clock, False),
                                       Method.GRAPH: lambda: replay.decode(steps, ctx.clock, False)}, 3)
            eager_ms = ctx.timing(M.STEP_MS, flat(samples[Method.EAGER]), method=Method.EAGER, batch=batch).median
            graph_ms = ctx.timing(M.STEP_MS, flat(samples[Method.GRAPH]), method=Method.GRAPH, batch=batch).median
        saving = eager_ms - graph_ms
        ctx.metric(M.SAVING_MS_PER_STEP, round(saving, 5), batch=batch, source=source)
        be = break_even_calls(graphed.capture_s, eager_ms, graph_ms)
        ctx.metric(M.BREAK_EVEN_STEPS, be, batch=batch)
        ctx.progress(f"batch {batch}: capture {graphed.capture_s:.3f} s, saves {saving:.3f} ms/step, pays after {be} steps")
        del graphed, state
