"""graph_hazards: the two ways a captured graph breaks silently or fatally.

(a) A graph keeps reading the memory it was captured with. Replacing the state's input-token tensor
    by a new one changes nothing: the replayed tokens equal an untouched run's, and no error is
    raised. Copying into the captured buffer in place is the remedy (and does change the output).
(b) A graph does not check its bounds. Replaying past the end of a small cache is an out-of-range
    index on the device: a device-side assert that leaves the CUDA context unusable, so it runs in a
    child process whose death is recorded. Beside it: the same eager step past the end (on CUDA it
    asserts too: the bounds check is in the kernel; on the CPU it raises a catchable IndexError),
    and GraphedStep's host-side guard, which raises a Python error before anything is launched.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from lab.step import decode
from lab.contract import metrics as M
from lab.run.childproc import last_error_line, run_child
from lab.step.graphs import CacheFullError, GraphedStep
from lab.step.model import Weights, build_model, extract_weights, resolve_weights
from lab.contract import notes as N
from lab.contract.names import Method, Param as P
from lab.contract.options import NoOptions
from lab.contract.profiles import TINY
from lab.run.context import Context

Options = NoOptions  # no knobs: the chapter's tiny model and small cache, whatever the profile

SMALL_CACHE = 24  # slots: the chapter's small cache
PROMPT = 8
STEPS = 5


def _tiny_weights(device: str) -> Weights:
    model = build_model(TINY, resolve_weights(TINY, "random"), device=device)
    return extract_weights(model)


def _prompt(device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, TINY.vocab_size, (1, PROMPT), generator=g).to(device)


def past_end_child(kind: str, device: str = "cuda") -> dict[str, Any]:
    """Child-process body: step past the end of a SMALL_CACHE-slot cache with no host check."""
    w = _tiny_weights(device)
    state = decode.prefilled(w, _prompt(device), SMALL_CACHE)
    steps_done = 0
    with torch.no_grad():
        if kind == Method.GRAPH:
            g = GraphedStep(decode.decode_step, state, w)
            g.sync_position()
            for _ in range(SMALL_CACHE + 4):
                g.replay_unchecked()
                steps_done += 1
        else:
            for _ in range(SMALL_CACHE + 4):
                decode.decode_step(state, w)
                steps_done += 1
        if device == "cuda":
            torch.cuda.synchronize()
    return {"steps_done": steps_done, "survived": True}


def _replaced_input(ctx: Context[Options]) -> None:
    dev = str(ctx.device)
    w = _tiny_weights(dev)
    prompt = _prompt(dev)

    def run_graph(mutate: str | None) -> list[int]:
        state = decode.prefilled(w, prompt, SMALL_CACHE)
        g = GraphedStep(decode.decode_step, state, w)
        g.sync_position()
        other = (int(state.tok.item()) + 1) % TINY.vocab_size
        if mutate == "replace":
            state.tok = torch.full_like(state.tok, other)  # a new tensor: the graph never sees it
        elif mutate == "copy":
            state.tok.copy_(torch.full_like(state.tok, other))  # in place: the graph reads it
        for _ in range(STEPS):
            g.replay()
        torch.cuda.synchronize()
        start = PROMPT + 1  # out[PROMPT] is the prefill's token; replays write the slots after it
        return state.out[0, start:start + STEPS].tolist()  # `out` itself was never replaced

    untouched = run_graph(None)
    replaced = run_graph("replace")
    copied = run_graph("copy")
    ctx.note(N.REPLACED_INPUT.key, {"untouched": untouched, "after_replacing_tok": replaced, "after_copy_into_tok": copied})
    ctx.metric(M.REPLACED_INPUT_TOKENS_EQUAL_UNTOUCHED, replaced == untouched, hazard="replaced input")
    ctx.metric(M.COPIED_INPUT_CHANGES_TOKENS, copied != untouched, hazard="replaced input")
    ctx.check("replacing a captured input is silently ignored (tokens equal an untouched run)", replaced == untouched,
              detail=f"untouched {untouched}, replaced {replaced}", fatal=False)
    ctx.check("copying into the captured input changes the output", copied != untouched,
              detail=f"untouched {untouched}, copied {copied}", fatal=False)


def _past_end(ctx: Context[Options]) -> None:
    dev = str(ctx.device)
    outcomes: dict[str, Any] = {}
    kinds = (Method.GRAPH, Method.EAGER)
    # The two children run side by side (each its own process and CUDA context): most of a child's time
    # is its start-up (interpreter, torch, CUDA), which overlaps; nothing is shared between them.
    with ThreadPoolExecutor(len(kinds)) as pool:
        children = dict(zip(kinds, pool.map(lambda k: run_child("lab.experiments.graph_hazards:past_end_child",
                                                                {P.KIND: str(k), "device": dev}, timeout_s=300),
                                            kinds)))
    for kind in kinds:
        child = children[kind]
        died = not child.ok
        outcomes[f"{kind}_cuda_child"] = {**child.as_dict(), "died": died, "value": child.value,
                                          "device_assert": "device-side assert" in child.stderr_tail,
                                          "message": last_error_line(child.stderr_tail)}
        ctx.metrics({M.CHILD_DIED: died, M.CHILD_EXIT_CODE: child.exit_code,
                     M.DEVICE_ASSERT_SEEN: "device-side assert" in child.stderr_tail}, method=kind, device=dev)
        ctx.progress(f"{kind} past the end on {dev}: {child.describe()}")
    ctx.check("graph replay past the cache end kills its process", outcomes["graph_cuda_child"]["died"],
              detail=outcomes["graph_cuda_child"]["how_it_ended"], fatal=False)
    # eager on the CPU: a catchable Python exception at the same point
    w = _tiny_weights("cpu")
    state = decode.prefilled(w, _prompt("cpu"), SMALL_CACHE)
    caught, steps_done = None, 0
    try:
        with torch.no_grad():
            for _ in range(SMALL_CACHE + 4):
                decode.decode_step(state, w)
                steps_done += 1
    except (IndexError, RuntimeError) as exc:
        caught = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    outcomes["eager_cpu_in_process"] = {"caught": caught, "steps_done": steps_done}
    ctx.metric(M.EAGER_CPU_EXCEPTION_CAUGHT, caught is not None, method=Method.EAGER, device="cpu")
    # GraphedStep's guard: a Python error on the host, before any launch; the process carries on
    gw = _tiny_weights(dev)
    gstate = decode.prefilled(gw, _prompt(dev), SMALL_CACHE)
    g = GraphedStep(decode.decode_step, gstate, gw)
    guard_msg, replays = None, 0
    try:
        for _ in range(SMALL_CACHE + 4):
            g.replay()
            replays += 1
    except CacheFullError as exc:
        guard_msg = str(exc)
    torch.cuda.synchronize()
    alive = bool(torch.ones(1, device=dev).add(1).item() == 2)
    outcomes["graphed_step_guard"] = {"raised": guard_msg, "replays_before": replays, "process_alive_after": alive}
    ctx.metric(M.GUARD_RAISED, guard_msg is not None, method="GraphedStep")
    ctx.metric(M.GUARD_REPLAYS_BEFORE_ERROR, replays, method="GraphedStep")
    ctx.check("GraphedStep's host guard raises before the cache end and the process lives on",
              guard_msg is not None and alive and replays == SMALL_CACHE - PROMPT - 1,
              detail=f"{replays} replays, then: {guard_msg}")
    ctx.note(N.PAST_END.key, outcomes)


def run(ctx: Context[Options]) -> None:
    _replaced_input(ctx)
    _past_end(ctx)
