"""graph_buckets: serving any batch size from a few captured graphs.

A CUDA graph replays fixed shapes, so a server captures graphs for a ladder of batch sizes and pads
each batch up to the smallest bucket that holds it. Ladders compared, for batch sizes 1..max_batch:
- `per-size`: one graph per batch size (no padding, the most graphs);
- `pow2`: 1, 2, 4, ... (at most 2x padding, log2 graphs);
- `vllm`: vLLM's default `cudagraph_capture_sizes`, 1, 2, 4, then multiples of 8 up to 256, then
  multiples of 16 (vllm-project/vllm, `vllm/config/vllm.py` `VllmConfig._set_cudagraph_sizes`, and
  the docstring of `CompilationConfig.max_cudagraph_capture_size` in `vllm/config/compilation.py`:
  `[1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_cudagraph_capture_size + 1, 16))`;
  https://github.com/vllm-project/vllm/blob/main/vllm/config/compilation.py, read at commit
  000fc94b754f66aeb60ef5acf1ea2e94cdc65164), cut at max_batch (which is added if missing, so that
  every size of the mix has a bucket).
As engines do (SGLang's docs/advanced_features/cuda_graphs.md: "Capture runs largest -> smallest to
maximize buffer reuse"), every graph of a ladder works on views of one max-batch state (the KV
cache is shared, rows [0, b) of it) and the graphs share one memory pool, captured largest first.

Measured per ladder: capture time (warm-up + capture, summed) and the memory the ladder's graphs
reserved (pool and output buffers); per bucket size: replay step time (eager on a CPU host, where
capture is a skipped part). Derived for a uniform mix of batch sizes 1..max_batch: the wasted work
(padded rows / rows computed), the expected step time (each size on its bucket), and the score
expected time x graph memory relative to the first ladder (one graph per size by default); the
ladder with the lowest score wins (`RULE`). A padded run must not change the real rows' tokens:
checked for a few sizes against the eager step at that size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from lab.step import decode
from lab.contract import metrics as M
from lab.step.decode import DecodeState
from lab.step.graphs import GraphedStep
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.experiments.common.sweep import conclude, free_device_memory, prompt_for
from lab.measure.timing import flat, rotating_rounds, time_calls
from lab.run.context import Context

Ladder = Literal["per-size", "pow2", "vllm"]
VLLM_DEFAULT = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 512 + 1, 16))
RULE = ("The ladder with the lowest expected step time x graph memory (relative to the first ladder) wins; without a "
        "memory measurement (no CUDA), the lowest expected step time, fewer graphs breaking a tie within 2%.")


@dataclass(frozen=True)
class Options:
    max_batch: int = option(64, "the largest batch size of the uniform mix (1..max_batch)", minimum=1)
    ladders: tuple[Ladder, ...] = option(("per-size", "pow2", "vllm"), "bucket ladders; the first is the reference "
                                                                        "of the score")
    steps: int = option(16, "replays per round for each bucket's step time", minimum=1)
    rounds: int = option(3, "rounds, buckets in rotating order", minimum=1)
    shared_pool: bool = option(True, "the graphs of a ladder share one memory pool (captured largest first)")
    check_sizes: tuple[int, ...] = option((3, 5, 33), "batch sizes whose padded rows are checked against their own "
                                                      "eager run (those above max_batch are left out)", minimum=1)


# ---------------------------------------------------------------------------- ladder arithmetic (no device)

def ladder(name: str, max_batch: int) -> list[int]:
    """The bucket sizes of a ladder for batches 1..max_batch, ascending; max_batch is always the last."""
    if name == "per-size":
        sizes = list(range(1, max_batch + 1))
    elif name == "pow2":
        sizes = [2 ** i for i in range(max_batch.bit_length()) if 2 ** i <= max_batch]
    elif name == "vllm":
        sizes = [s for s in VLLM_DEFAULT if s <= max_batch]
    else:
        raise ValueError(f"unknown ladder {name!r}")
    return sorted(set(sizes) | {max_batch})


def bucket(sizes: list[int], n: int) -> int:
    """The smallest bucket that holds a batch of n."""
    for b in sizes:
        if b >= n:
            return b
    raise ValueError(f"no bucket holds a batch of {n} (largest {sizes[-1]})")


def waste(sizes: list[int], mix: list[int]) -> float:
    """Padded rows over rows computed, each batch of the mix run on its bucket."""
    padded = sum(bucket(sizes, n) for n in mix)
    return (padded - sum(mix)) / padded


def expected_ms(sizes: list[int], ms: dict[int, float], mix: list[int]) -> float:
    """Mean step time over the mix, each batch on its bucket."""
    return sum(ms[bucket(sizes, n)] for n in mix) / len(mix)


def winner(scores: dict[str, float | None], expected: dict[str, float], graphs: dict[str, int]) -> str:
    """RULE: the lowest score; without scores the lowest expected time, fewer graphs within 2%."""
    scored = {k: v for k, v in scores.items() if v is not None}
    if scored:
        return min(scored, key=scored.__getitem__)
    best = min(expected.values())
    close = [k for k, v in expected.items() if v <= best * 1.02]
    return min(close, key=lambda k: (graphs[k], expected[k]))


# ---------------------------------------------------------------------------- measuring

def view(state: DecodeState, b: int) -> DecodeState:
    """Rows [0, b) of a max-batch state: the same buffers, so every bucket shares one cache."""
    return DecodeState(tok=state.tok[:b], pos=state.pos, out=state.out[:b],
                       caches=tuple(c[:, :b] for c in state.caches), slots=state.slots)


def _time(call, state: DecodeState, start_pos: int, steps: int, clock, graphed: GraphedStep | None) -> list[float]:
    state.pos.fill_(start_pos)  # the step is the same work at every position: restart instead of re-prefilling
    if graphed is not None:
        graphed.sync_position()
    with torch.no_grad():
        return time_calls(call, steps, clock)


def _capture_ladder(ctx: Context[Options], state: DecodeState, w, sizes: list[int], shared: bool) -> tuple[dict[int, GraphedStep], float,
                                                                                       float]:
    """Graphs for every bucket (largest first), their summed capture seconds and the MiB they hold.

    Memory is what the allocator still reserves after the captures once its unused cached blocks are
    released (`empty_cache` before and after): the graphs' private pools and their output buffers,
    not the warm-up's transient tensors or GraphedStep's state snapshots."""
    free_device_memory(ctx.device)
    before = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle() if shared else None
    graphs = {b: GraphedStep(decode.decode_step, view(state, b), w, warmup=ctx.profile.warmup, pool=pool)
              for b in sorted(sizes, reverse=True)}
    free_device_memory(ctx.device)
    return graphs, sum(g.capture_s for g in graphs.values()), (torch.cuda.memory_reserved() - before) / 2 ** 20


def _caller(state: DecodeState, w, b: int, g: GraphedStep | None):
    """One step of bucket b: the graph's replay, or the eager step on rows [0, b) where nothing was captured."""
    if g is not None:
        return g.replay
    rows = view(state, b)
    return lambda: decode.decode_step(rows, w)


def run(ctx: Context[Options]) -> None:
    o, prof = ctx.options, ctx.profile
    _, w = ctx.gpt2("float32")
    mix = list(range(1, o.max_batch + 1))
    ladders = {name: ladder(name, o.max_batch) for name in o.ladders}
    ctx.note(N.LADDERS.key, {k: v for k, v in ladders.items()})
    ctx.note(N.SWEEP_CONFIG.key, {P.MAX_BATCH: o.max_batch, P.STEPS: o.steps, "rounds": o.rounds, "shared_pool": o.shared_pool,
                        P.MAX_LEN: prof.max_len, "prompt_len": prof.prompt_len, "mix": f"uniform over 1..{o.max_batch}"})
    cuda = ctx.device.type == "cuda"
    state = decode.new_state(w, o.max_batch, prof.max_len)
    prompts = prompt_for(int(w.wte.shape[0]), o.max_batch, prof.prompt_len, ctx.device, 13000)
    decode.prefill(state, w, prompts)
    ctx.metric(M.STATE_MIB, round(state.nbytes() / 2 ** 20, 2), max_batch=o.max_batch)
    ms: dict[int, float] = {}
    kept: dict[int, GraphedStep] = {}
    capture_s: dict[str, float] = {}
    pool_mib: dict[str, float] = {}
    method = Method.GRAPH if cuda else Method.EAGER
    for name, sizes in ladders.items():
        ctx.metrics({M.BUCKET_GRAPHS: len(sizes), M.WASTE_FRACTION: round(waste(sizes, mix), 5)}, ladder=name)
        if cuda:
            ctx.progress(f"capturing ladder {name} ({len(sizes)} graphs)")
            graphs, capture_s[name], pool_mib[name] = _capture_ladder(ctx, state, w, sizes, o.shared_pool)
            ctx.metric(M.CAPTURE_S, round(capture_s[name], 4), ladder=name)
            ctx.metric(M.GRAPH_POOL_MIB, round(pool_mib[name], 2), ladder=name)
        else:
            ctx.skip(f"capture ladder {name}", Code.NO_CUDA, "capture time and graph memory need a CUDA device; the "
                                                             "step time per bucket is the eager step's here")
            graphs = {}
        todo = [b for b in sizes if b not in ms]
        calls = {b: (lambda b=b, g=graphs.get(b): _time(_caller(state, w, b, g), state, prof.prompt_len, o.steps,
                                                        ctx.clock, g)) for b in todo}
        for b, per_round in rotating_rounds(calls, o.rounds).items():
            ms[b] = ctx.timing(M.STEP_MS, flat(per_round), bucket=b, method=method).median
        kept.update({b: g for b, g in graphs.items() if b in _check_buckets(o, ladders)})
        del graphs, calls  # the next ladder's memory is measured with this one's graphs gone
        free_device_memory(ctx.device)
    _check_padding(ctx, o, w, state, prompts, ladders, kept)
    expected = {name: expected_ms(sizes, ms, mix) for name, sizes in ladders.items()}
    ref = next(iter(ladders))
    scores: dict[str, float | None] = {}
    for name in ladders:
        ctx.metric(M.EXPECTED_STEP_MS, round(expected[name], 5), ladder=name)
        ok = cuda and pool_mib.get(ref, 0) > 0
        scores[name] = (expected[name] / expected[ref]) * (pool_mib[name] / pool_mib[ref]) if ok else None
        if scores[name] is not None:
            ctx.metric(M.TIME_MEMORY_SCORE, round(scores[name], 4), ladder=name)
    graphs_n = {k: len(v) for k, v in ladders.items()}
    best = winner(scores, expected, graphs_n)
    conclude(ctx, _sentence(best, ref, ladders, expected, capture_s, pool_mib, mix, scores), RULE)


def _check_buckets(o, ladders: dict[str, list[int]]) -> set[int]:
    coarse = ladders.get("pow2") or next(iter(ladders.values()))
    return {bucket(coarse, n) for n in o.check_sizes if n <= o.max_batch}


def _check_padding(ctx: Context[Options], o, w, state: DecodeState, prompts: torch.Tensor, ladders: dict[str, list[int]],
                   graphs: dict[int, GraphedStep]) -> None:
    """A batch of n run padded on its bucket b gives each real row the tokens the eager step gives at batch n."""
    coarse_name = "pow2" if "pow2" in ladders else next(iter(ladders))
    coarse = ladders[coarse_name]
    for n in (n for n in o.check_sizes if n <= o.max_batch):
        b = bucket(coarse, n)
        decode.prefill(state, w, prompts)
        g = graphs.get(b)
        if g is not None:
            g.sync_position()
        step = _caller(state, w, b, g)
        with torch.no_grad():
            for _ in range(o.steps):
                step()
        got = state.out[:n].cpu()
        own = decode.prefilled(w, prompts[:n], state.max_len)
        with torch.no_grad():
            for _ in range(o.steps):
                decode.decode_step(own, w)
        end = ctx.profile.prompt_len + o.steps + 1
        agree = (got[:, :end] == own.out[:, :end].cpu()).float().mean().item()
        params = {P.BATCH: n, P.BUCKET: b, P.LADDER: coarse_name}
        ctx.metrics({M.TOKEN_AGREEMENT: round(agree, 6), M.TOKENS_EQUAL: agree == 1.0}, **params)
        ctx.check(f"padding batch {n} to {b} changes no real row's tokens", agree == 1.0, fatal=False,
                  detail=f"agreement {agree:.4f} (kernels chosen for another batch size may round differently)",
                  **params)


def _sentence(best: str, ref: str, ladders, expected, capture_s, pool_mib, mix, scores) -> str:
    n = len(ladders[best])
    text = (f"The {best} ladder ({n} graphs) serves batches 1-{mix[-1]} with {waste(ladders[best], mix):.0%} padded "
            f"rows at {expected[best]:.3g} ms per step on average")
    if best != ref:
        text += f" against {expected[ref]:.3g} ms with {ref} ({len(ladders[ref])} graphs)"
    if scores.get(best) is not None:
        text += (f", capturing in {capture_s[best]:.2f} s and reserving {pool_mib[best]:,.0f} MiB (the {ref} "
                 f"ladder: {capture_s[ref]:.2f} s, {pool_mib[ref]:,.0f} MiB): the lowest time x memory")
    else:
        text += "; graph memory was not measured on this host, so the choice is by time alone"
    return text + "."
