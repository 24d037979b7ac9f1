"""The hand-fused step (lab.step.fused) in Triton's interpreter, one test per case, against the eager step.

The interpreter must be switched on (TRITON_INTERPRET=1) before Triton is imported, so the cases run
in one worker process started with it (this file run as `python tests/test_fused_interpreter.py
--serve`): each test sends the worker one case name and gets that case's result back, so a case that
fails, raises or hangs fails its own test only (a worker that dies or overruns is replaced for the
next test), Triton's rewritten kernels are reused from case to case, and no other test sees the
variable. Skipped, with the import error, without Triton.

Cases: both projection paths (lab.step.fused.rule) at batch 1 and at a batch above the rule's
threshold, in fp32 (equal to eager) and bf16 (teacher-forced), the PREFETCH kernels, odd shapes that
mask every lane, the gemm path bound in every library-call form (lab.step.fused.layout). Configs at batch 1 are the heuristics (`tuned={}`): the tuned table's GPT-2 block
sizes on the tiny model would make programs of 4096-wide masked tiles, a minute in the interpreter
(the AOT checks in tests/test_fused.py compile the tuned configs for GPT-2's shapes).

Tolerances, as in tests/test_fused.py: fp32 logits and cache within 1e-5 of their largest magnitude;
bf16 logits within 5% of the fp32 reference's largest and no worse than 1.5x the eager bf16 step's
own error. Tokens, `out`, `tok` and `pos` must be equal, always.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fused_helpers import assert_equal_run, launches_per_step  # noqa: E402
from lab.step.fused import configs as C, triton_import_error  # noqa: E402

TRITON_MISSING = triton_import_error()
pytestmark = pytest.mark.skipif(TRITON_MISSING is not None, reason=f"Triton does not import: {TRITON_MISSING}")
FP32_REL, BF16_REL, BF16_VS_EAGER = 1e-5, 0.05, 1.5
CASE_TIMEOUT_S = 300
MAX_LEN = 16  # cache slots of the batch-1 gemv cases (their heuristic configs are chosen for it)
CASES: dict[str, Callable[[], dict[str, Any]]] = {}


def case(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    CASES[fn.__name__.removeprefix("case_").replace("_", "-")] = fn
    return fn


# ------------------------------------------------------------------ the cases (run in the worker)

def _heuristic(model: str, batch: int, prefetch: bool = False, max_len: int = 0) -> dict[str, Any]:
    """The heuristic configs (no tuned table) for the tiny model's shapes and a cache of `max_len` slots."""
    from lab.step.fused import check as K

    w = K.weights_for(model)
    return C.choose(w.n_embd, w.n_head, int(w.wte.shape[0]), max_len or MAX_LEN, batch, w.dtype, 2, tuned={}, prefetch=prefetch)


def _free(model: str, batch: int, **kw: Any) -> dict[str, Any]:
    from lab.step.fused import check as K

    kw.setdefault("sms", 2)
    return K.free_running(K.weights_for(model), batch, steps=kw.pop("steps", 3), **kw)


def _forced(batch: int, **kw: Any) -> dict[str, Any]:
    import torch
    from lab.step.fused import check as K

    return K.teacher_forced(K.weights_for("tiny"), K.weights_for("tiny", dtype=torch.bfloat16), batch, steps=3,
                            sms=2, **kw)


@case
def case_gemv_fp32_b1() -> dict[str, Any]:
    return _free("tiny", 1, max_len=MAX_LEN, overrides=_heuristic("tiny", 1))


@case
def case_gemv_fp32_b3() -> dict[str, Any]:
    return _free("tiny", 3)


@case
def case_gemv_fp32_b8() -> dict[str, Any]:  # the gemv path above the threshold (forced): still eager's tokens
    return _free("tiny", 8, path="gemv", steps=2)


@case
def case_gemv_odd_b3() -> dict[str, Any]:
    # batch blocks partly masked (BB 2 of 3 rows), K in chunks whose last is partial (48 = 32 + 16,
    # 192 = 128 + 64), attention in splits of 8 slots (with a 4-token prompt and a 14-slot cache the second
    # split is never reached: it must weigh nothing), several lm_head blocks for the argmax
    from lab.step.fused.check import parse_configs

    odd = parse_configs('{"attention": {"BS": 8}, "ln_qkv": {"BB": 2, "BN": 16, "BK": 32}, '
                        '"fc2": {"BB": 2, "BN": 16, "BK": 128}, "lm_head": {"BB": 1, "BN": 32, "BK": 32}}')
    return _free("odd", 3, steps=2, prompt_len=4, sms=4, overrides=odd)


SUM_ONCE = {"lm_head": {"SUM_ONCE": 1}}  # lm_head's products summed over K once, after its last chunk


@case
def case_lm_sum_once_odd() -> dict[str, Any]:
    # lm_head's SUM_ONCE over gemv-odd-b3's masked lanes: K in a chunk of 32 and a partial one of 16 (48), row blocks
    # of 32 (500 = 15 x 32 + 20), batch 3
    from lab.step.fused.check import parse_configs

    odd = parse_configs('{"lm_head": {"BB": 1, "BN": 32, "BK": 32}}')
    return _free("odd", 3, steps=2, prompt_len=4, sms=4, overrides=odd, switches=SUM_ONCE)


@case
def case_prefetch_sum_once_bf16_b1() -> dict[str, Any]:
    # the same on the PREFETCH path in bf16, lm_head's heuristic tiles (K in two chunks of 32)
    return _forced(1, prefetch=True, overrides={**_heuristic("tiny", 1, prefetch=True, max_len=8 + 3 + 2),
                                                "lm_head": C.GemvConfig(1, 32, 32)}, switches=SUM_ONCE)


@case
def case_gemv_bf16_b2() -> dict[str, Any]:
    return _forced(2)


@case
def case_prefetch_fp32_b1() -> dict[str, Any]:
    return _free("tiny", 1, max_len=MAX_LEN, prefetch=True, overrides=_heuristic("tiny", 1, prefetch=True))


@contextmanager
def _measured(table: set[tuple[str, int]], shape: tuple[str, int]) -> Iterator[None]:
    """One of configs' per-shape tables (LN_UNFOLDED, HEAD_MAJOR, EVICT_FIRST: measured on a device, at GPT-2's widths)
    with an interpreter model's (dtype, width) in it for one case."""
    table.add(shape)
    try:
        yield
    finally:
        table.discard(shape)


@case
def case_prefetch_unfolded_fp32_b1() -> dict[str, Any]:
    # the PREFETCH layer norms unfolded (configs.LN_UNFOLDED: on a device, GPT-2 124M in fp32), on the tiny model
    with _measured(C.LN_UNFOLDED, ("float32", 64)):
        return case_prefetch_fp32_b1()


@case
def case_prefetch_evict_fp32_b1() -> dict[str, Any]:
    # the weight loads marked to leave L2 first (configs.EVICT_FIRST: on a device, GPT-2 124M and 1.5B bf16), on the
    # tiny model: the same values
    with _measured(C.EVICT_FIRST, ("float32", 64)):
        return case_prefetch_fp32_b1()


@case
def case_prefetch_odd_b3() -> dict[str, Any]:
    return _free("odd", 3, steps=2, prompt_len=4, sms=4, prefetch=True)


@case
def case_prefetch_bf16_b1() -> dict[str, Any]:
    return _forced(1, prefetch=True, overrides=_heuristic("tiny", 1, prefetch=True, max_len=8 + 3 + 2))


@case
def case_prefetch_oddk_bf16_b1() -> dict[str, Any]:
    # rows of 45 (odd: the slice widened by a cast) and 180 (fc2: packed pairs, the last one masked in a 256-wide slice)
    import torch
    from lab.step.fused import check as K

    return K.teacher_forced(K.weights_for("odd-k"), K.weights_for("odd-k", dtype=torch.bfloat16), 1, steps=3, sms=2,
                            prefetch=True)


FOLD_QKV = '"ln_qkv": {"BB": 1, "BN": 8, "BK": 64}'  # a BN that divides the tiny model's head width (16)


@case
def case_fold_fp32_b1(switches: dict[str, dict[str, int]] | None = None, prompt_len: int = 8) -> dict[str, Any]:
    # the attention folded into ln_qkv's last program of each head (`switches` bound on the plan, from a prompt of
    # `prompt_len` tokens: the cases below that take this one)
    from lab.step.fused.check import parse_configs

    return _free("tiny", 1, max_len=MAX_LEN, prompt_len=prompt_len, prefetch=True, fold=True, switches=switches,
                 overrides={**_heuristic("tiny", 1, prefetch=True), **parse_configs("{" + FOLD_QKV + "}")})


@case
def case_fold_odd_b3(switches: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    # folded over odd shapes: heads 12 wide (BN 4, three programs a part), batch blocks of 2 rows (the second half
    # masked), and the reached slots in chunks of 8 (a 20-token prompt: three chunks, the last partial), so the
    # online softmax carries across chunks (`switches` bound on the plan: the cases below that take this one)
    from lab.step.fused import configs as C
    from lab.step.fused.check import parse_configs

    real = C.fold_slots
    C.fold_slots = lambda max_len, head_dim, num_warps: 8  # type: ignore[assignment]
    try:
        return _free("odd", 3, steps=2, prompt_len=20, sms=4, fold=True, switches=switches,
                     overrides=parse_configs('{"ln_qkv": {"BB": 2, "BN": 4, "BK": 32}}'))
    finally:
        C.fold_slots = real  # type: ignore[assignment]


@case
def case_fold_head_major_odd_b3() -> dict[str, Any]:
    # case_fold_odd_b3 with ln_qkv's programs head by head (configs.HEAD_MAJOR: on a device, GPT-2 1.5B in bf16): the
    # heads' counters, the parts and the batch blocks as the q-K-V order has them
    with _measured(C.HEAD_MAJOR, ("float32", 48)):
        return case_fold_odd_b3()


@case
def case_fold_head_major_switched_fp32_b1() -> dict[str, Any]:
    # a switch bound by name on the plan's launches (check.free_running's `switches`: step.with_switches, what the A/B
    # tool's arms bind), here ln_qkv's programs head by head on the tiny model: the same tokens as eager's
    from lab.step.fused.check import parse_configs

    return _free("tiny", 1, max_len=MAX_LEN, prefetch=True, fold=True, switches={"ln_qkv": {"HEAD_MAJOR": 1}},
                 overrides={**_heuristic("tiny", 1, prefetch=True), **parse_configs("{" + FOLD_QKV + "}")})


OLDER_FIRST = {"ln_qkv": {"OLDER_FIRST": 1}}  # the folded attention over the older slots by the head's last q program


@case
def case_fold_older_first_odd_b3() -> dict[str, Any]:
    # case_fold_odd_b3 with OLDER_FIRST (attention._fold_attention): the head's last q program attends over the slots
    # before the position in chunks of 8 (the online softmax carries across them) and the last count-in adds the new
    # slot, for each of the block's two batch rows (the second block's second masked)
    return case_fold_odd_b3(OLDER_FIRST)


@case
def case_fold_older_first_head_major_odd_b3() -> dict[str, Any]:
    # the same with ln_qkv's programs head by head (each head's q programs, then its K and V programs)
    with _measured(C.HEAD_MAJOR, ("float32", 48)):
        return case_fold_older_first_odd_b3()


@case
def case_fold_older_first_fp32_b1() -> dict[str, Any]:
    # on the PREFETCH path as the lab's fused-pdl-prefetch runs it (its layer norms folded), from a one-token prompt:
    # the first step's older slots are one, the prompt's
    return case_fold_fp32_b1(OLDER_FIRST, prompt_len=1)


WORDS = {"ln_qkv": {"OLDER_FIRST": 2}}  # ... handed over to the last count-in in flagged words, with no fence


@case
def case_fold_older_first_words_odd_b3() -> dict[str, Any]:
    # case_fold_older_first_odd_b3 with OLDER_FIRST=2: every program's rows and the last q program's partial as flagged
    # words, taken (and zeroed) by the last to count in
    return case_fold_odd_b3(WORDS)


@case
def case_fold_older_first_words_head_major_odd_b3() -> dict[str, Any]:
    # ... head by head: the words at the rows each program's place in that order names
    with _measured(C.HEAD_MAJOR, ("float32", 48)):
        return case_fold_older_first_words_odd_b3()


@case
def case_fold_older_first_words_fp32_b1() -> dict[str, Any]:
    return case_fold_fp32_b1(WORDS, prompt_len=1)


@case
def case_fold_older_first_words_bf16_b1() -> dict[str, Any]:
    return case_fold_bf16_b1(WORDS)


@case
def case_older_first_words_exact() -> dict[str, Any]:
    # OLDER_FIRST=1 against OLDER_FIRST=2, step by step from the same prefill (the odd shapes, the PREFETCH path, bf16):
    # the words carry the values memory did, so the two are bit for bit the same
    return _with_and_without(WORDS, prefetch=True, bf16=True, base=OLDER_FIRST)


@case
def case_fold_older_first_bf16_b1() -> dict[str, Any]:
    return case_fold_bf16_b1(OLDER_FIRST)


def _with_and_without(switches: dict[str, dict[str, int]], prefetch: bool, bf16: bool = False,
                      change: Callable[[Any, Callable[[], Any]], Any] | None = None,
                      base: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """The folded plan over odd shapes (case_fold_odd_b3's: heads 12 wide, batch blocks of 2 rows, or one of 4 on the
    PREFETCH path, the last row masked; the reached slots in chunks of 8, so the online softmax carries across chunks)
    without and with `switches` (or `change`d: `change(plan, made)`, `made` building another plan of its state),
    step by step from the same prefill (bf16: the weights, cache and activations in bf16, even rows read as packed
    pairs; `base`: switches bound on the first plan too): whether each step's logits and state are bit-identical, and
    which launches bound a switch."""
    import torch

    from lab.step import decode as D
    from lab.step.fused import check as K, step as S

    real = C.fold_slots
    C.fold_slots = lambda max_len, head_dim, num_warps: 8  # type: ignore[assignment]
    try:
        w = K.weights_for("odd", dtype=torch.bfloat16) if bf16 else K.weights_for("odd")
        prompt = K.prompt_for(3, 20, int(w.wte.shape[0])).to(w.device)
        states = [D.new_state(w, 3, 28) for _ in range(2)]
        for st in states:
            D.prefill(st, w, prompt)
        # PREFETCH: one chunk of the row, and the batch in one block (the rule declines a slice read twice)
        odd = K.parse_configs('{"ln_qkv": {"BB": %d, "BN": 4, "BK": %d}}' % ((4, 64) if prefetch else (2, 32)))
        plans = [S.prepare(st, w, sms=4, fold=True, overrides=odd, prefetch=prefetch) for st in states]
        plans[0] = S.with_switches(plans[0], base) if base else plans[0]
        plans[1] = (S.with_switches(plans[1], switches) if change is None else
                    change(plans[1], lambda: S.prepare(states[1], w, sms=4, fold=True, overrides=odd, prefetch=prefetch)))
        out: dict[str, Any] = {"fold": [p.fold for p in plans], "prefetch": [p.prefetch for p in plans],
                               "identical": [], "bound": [sorted(f"{x.name}:{k}" for x in p.launches for k in
                                                                 ("KV_AT_ONCE", "POS_AT_ONCE", "RES_AT_ONCE",
                                                                  "OLDER_FIRST") if x.meta.get(k))
                                                          for p in plans]}
        for _ in range(3):
            logits = [p().clone() for p in plans]
            out["identical"].append(torch.equal(logits[0], logits[1]) and all(
                torch.equal(a, b) for a, b in zip(states[0].buffers().values(), states[1].buffers().values())))
        return out
    finally:
        C.fold_slots = real  # type: ignore[assignment]


@case
def case_fold_kv_at_once_exact() -> dict[str, Any]:
    # the folded attention's KV_AT_ONCE (its scores made to wait for V's loads by a select that always takes K)
    return _with_and_without({"ln_qkv": {"KV_AT_ONCE": 1}}, prefetch=False)


AT_ONCE = {"ln_qkv": {"KV_AT_ONCE": 1, "POS_AT_ONCE": 1}, "proj": {"RES_AT_ONCE": 1}, "fc2": {"RES_AT_ONCE": 1}}


@case
def case_prefetch_at_once_exact() -> dict[str, Any]:
    # the PREFETCH path folded, with KV_AT_ONCE, ln_qkv's POS_AT_ONCE (its row selected by pos >= 0 between itself and
    # zeros) and proj's and fc2's RES_AT_ONCE (their products made to wait for the residual by zeroing the weight rows
    # whose residual is NaN: where none is, none)
    return _with_and_without(AT_ONCE, prefetch=True)


@case
def case_prefetch_at_once_bf16_exact() -> dict[str, Any]:
    return _with_and_without(AT_ONCE, prefetch=True, bf16=True)


@case
def case_place_swapped_exact() -> dict[str, Any]:
    # a plan with every one of its own buffers (workspace, folded layer-norm constants) taken from another plan of its
    # state, as lab.step.fused.place times it: the same values, bit for bit, as a plan of its own
    from lab.step.fused.place import owned, swapped

    seen: dict[str, Any] = {}

    def change(plan: Any, made: Callable[[], Any]) -> Any:
        other = made()
        state = plan.state_ref()
        buffers = owned(plan, plan.weights_ref().tensors() + list(state.buffers().values()))
        out = swapped(plan, other, [p for pos in buffers.values() for p in pos])
        own = {id(t) for t in vars(plan.workspace).values() if hasattr(t, "data_ptr")}
        seen.update(buffers=sorted(buffers), left=sum(id(a) in own for x in out.launches for a in x.args
                                                     if getattr(a, "numel", lambda: 0)()))
        return out

    return {**_with_and_without({}, prefetch=True, change=change), **seen}


@case
def case_residual_bf16_b2() -> dict[str, Any]:
    # the residual stream in bf16 (step.prepare's `residual`): every kernel reads it in fp32, the residual kernels round
    # their sums to bf16 as they store, as the eager bf16 step keeps its stream
    import torch

    return _forced(2, residual=torch.bfloat16)


@case
def case_fold_residual_bf16_b1() -> dict[str, Any]:
    import torch

    from lab.step.fused.check import parse_configs

    return _forced(1, prefetch=True, fold=True, residual=torch.bfloat16,
                   overrides={**_heuristic("tiny", 1, prefetch=True, max_len=8 + 3 + 2),
                              **parse_configs("{" + FOLD_QKV + "}")})


@case
def case_argmax_fold_odd() -> dict[str, Any]:
    # the argmax taken by lm_head's last program (step.prepare's argmax_fold) over gemv-odd-b3's masked lanes: 16 row
    # blocks of 32 (500 = 15 x 32 + 20) for each of 3 batch rows, 48 programs counting in, the last taking the rows two
    # at a time (the second pair masked)
    from lab.step.fused.check import parse_configs

    odd = parse_configs('{"lm_head": {"BB": 1, "BN": 32, "BK": 32}, "argmax": {"BB": 2, "num_warps": 1}}')
    return _free("odd", 3, steps=2, prompt_len=4, sms=4, overrides=odd, argmax_fold=True)


@case
def case_fold_argmax_fold_fp32_b1() -> dict[str, Any]:  # both folds, on the PREFETCH path, as a PDL plan would bind them
    from lab.step.fused.check import parse_configs

    return _free("tiny", 1, max_len=MAX_LEN, prefetch=True, fold=True, argmax_fold=True,
                 overrides={**_heuristic("tiny", 1, prefetch=True), **parse_configs("{" + FOLD_QKV + "}")})


@case
def case_fold_argmax_fold_bf16_b1() -> dict[str, Any]:
    from lab.step.fused.check import parse_configs

    return _forced(1, prefetch=True, fold=True, argmax_fold=True,
                   overrides={**_heuristic("tiny", 1, prefetch=True, max_len=8 + 3 + 2),
                              **parse_configs("{" + FOLD_QKV + "}")})


@case
def case_fold_bf16_b1(switches: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    # (`switches` bound on the plan: the cases above that take this one)
    from lab.step.fused.check import parse_configs

    return _forced(1, prefetch=True, fold=True, switches=switches,
                   overrides={**_heuristic("tiny", 1, prefetch=True, max_len=8 + 3 + 2),
                              **parse_configs("{" + FOLD_QKV + "}")})


PIECES = {"ln_qkv": {"PIECES": 1}, "ln_fc": {"PIECES": 1}}  # rows held as tiles of powers of two (projections._piece)
ODD_FOLD = '{"ln_qkv": {"BB": 1, "BN": 4, "BK": 64}}'  # a BN that divides the odd model's head width (12)


@case
def case_fold_pieces_odd_b1() -> dict[str, Any]:
    # ln_qkv's and ln_fc's rows of 48 held as pieces of 32 and 16 (PIECES), folded, the layer norms folded too
    from lab.step.fused.check import parse_configs

    return _free("odd", 1, sms=4, prefetch=True, fold=True, overrides=parse_configs(ODD_FOLD), switches=PIECES)


@case
def case_prefetch_pieces_unfolded_oddk_b1() -> dict[str, Any]:
    # rows of 45 as three pieces, 32, 8 and 8 (the last masked past 45), with the layer norms unfolded (configs.
    # LN_UNFOLDED: on a device, GPT-2 124M in fp32)
    with _measured(C.LN_UNFOLDED, ("float32", 45)):
        return _free("odd-k", 1, sms=4, prefetch=True, fold=False, switches=PIECES)


PIECES_FLAT = '{"ln_qkv": {"BB": 1, "BN": 2, "BK": 64}, "ln_fc": {"BB": 1, "BN": 4, "BK": 64}}'  # 2 x 4, 4 x 4 <= 16


@case
def case_fold_pieces_flat_b1() -> dict[str, Any]:
    # rows of 52 = 32 + 16 + 4, the third piece of each program's rows held flat at the second's width (ln_qkv's two
    # rows, ln_fc's four, end to end), folded
    from lab.step.fused.check import parse_configs

    return _free("pieces", 1, sms=4, prefetch=True, fold=True, overrides=parse_configs(PIECES_FLAT), switches=PIECES)


@case
def case_fold_pieces_flat_bf16_b1() -> dict[str, Any]:
    # the same in bf16: 26 pairs = 16 + 8 + 2, the third piece's pairs flat
    import torch

    from lab.step.fused import check as K

    return K.teacher_forced(K.weights_for("pieces"), K.weights_for("pieces", dtype=torch.bfloat16), 1, steps=3, sms=4,
                            prefetch=True, fold=True, overrides=K.parse_configs(PIECES_FLAT), switches=PIECES)


@case
def case_fold_pieces_odd_bf16_b1() -> dict[str, Any]:
    # PIECES over bf16 rows of 48 read as packed pairs: pieces of 16 and 8 pairs
    import torch

    from lab.step.fused import check as K

    return K.teacher_forced(K.weights_for("odd"), K.weights_for("odd", dtype=torch.bfloat16), 1, steps=3, sms=4,
                            prefetch=True, fold=True, overrides=K.parse_configs(ODD_FOLD), switches=PIECES)


@case
def case_gemm_fp32_b8() -> dict[str, Any]:  # the rule's choice at batch 8
    return _free("tiny", 8, steps=2)


@case
def case_gemm_fp32_b1() -> dict[str, Any]:  # forced at batch 1
    return _free("tiny", 1, path="gemm")


@case
def case_gemm_odd_b9() -> dict[str, Any]:
    # batch blocks of 2 rows for the layer norms (the fifth half masked), the combine in 32-column chunks
    # (48 = 32 + 16), splits of 8 slots (the second never reached), the logits' argmax in blocks of 64 (500 =
    # 7 x 64 + 52)
    from lab.step.fused.check import parse_configs

    odd = parse_configs('{"attention": {"BS": 8}, "add_ln": {"BB": 2, "BN": 64}, "combine": {"BB": 1, "BN": 32}, '
                        '"gelu": {"BB": 1, "BN": 128}, "block_argmax": {"BB": 2, "BN": 64}}')
    return _free("odd", 9, steps=2, prompt_len=4, sms=4, overrides=odd)


FORMS = {"qkv": "lt-n", "proj": "blas-t", "fc": "blas-n", "fc2": "lt-t", "lm_head": "lt-n"}  # all four forms


@case
def case_gemm_forms_fp32_b8() -> dict[str, Any]:
    # the gemm path with library-call forms other than the default (lab.step.fused.layout), as a measured choice
    # would bind them on CUDA: here a fake timer makes FORMS the fastest
    from lab.step.fused import layout as LY, library

    real_choose, real_measure, chosen = library.choose_forms, LY.measure, []

    def measure(projection: str, default: str, forms: Any, per_burst: int, timer: Any, agree: Any = None,
                shape: Any = (0, 0, 0)) -> Any:
        def fake(bursts: Any) -> dict[str, list[float]]:
            return {f: [1.0 if FORMS[projection] == f else 2.0] for f in bursts}

        return real_measure(projection, default, forms, per_burst, fake, agree, shape)

    def choose(w: Any, bufs: Any, timer: Any = None) -> Any:
        bound = real_choose(w, bufs, lambda bursts: {})
        chosen.append({k: str(v) for k, v in bound.choice.forms.items()})
        return bound

    library.choose_forms, LY.measure = choose, measure
    try:
        run = _free("tiny", 8, steps=2)
    finally:
        library.choose_forms, LY.measure = real_choose, real_measure
    return {**run, "forms": chosen}


@case
def case_gemm_bf16_b8() -> dict[str, Any]:
    return _forced(8)


@case
def case_gemm_bf16_b1() -> dict[str, Any]:
    return _forced(1, path="gemm")


@case
def case_persistent_fp32_b1() -> dict[str, Any]:  # one program: the grid barrier passes in the interpreter
    return _free("tiny", 1, max_len=MAX_LEN, overrides=_heuristic("tiny", 1), persistent={"programs": 1})


@case
def case_persistent_stepped_odd_b3() -> dict[str, Any]:
    # a launch per phase, no barrier, 3 programs walking every phase's tasks (pid, pid + 3, ...) over masked lanes
    from lab.step.fused.check import parse_configs

    odd = parse_configs('{"attention": {"BS": 8}, "ln_qkv": {"BB": 2, "BN": 16, "BK": 32}, '
                        '"fc2": {"BB": 2, "BN": 16, "BK": 128}, "lm_head": {"BB": 1, "BN": 32, "BK": 32}}')
    return _free("odd", 3, steps=2, prompt_len=4, sms=4, overrides=odd, persistent={"programs": 3, "stepped": True})


@case
def case_persistent_wide_odd() -> dict[str, Any]:  # wide tiles (at most one task a program a phase), barrier
    from lab.step.fused.persistent import wide_configs

    return _free("odd", 3, steps=2, prompt_len=4, sms=4, persistent={"programs": 1, "overrides": wide_configs(
        48, 500, 3, 1, 4)})


@case
def case_persistent_exact() -> dict[str, Any]:
    """The persistent plan (barrier, one program; stepped, five programs) against the five-kernel plan from the same
    prefill, step by step: bit-identical logits and state (the same arithmetic in the same order), the barrier's
    counters back at zero after every step."""
    import torch

    from lab.step import decode as D
    from lab.step.fused import check as K, persistent as PS, step as S

    w = K.weights_for("odd")
    prompt = K.prompt_for(2, 4, int(w.wte.shape[0])).to(w.device)
    states = [D.new_state(w, 2, 12) for _ in range(3)]
    for st in states:
        D.prefill(st, w, prompt)
    plans = [S.prepare(states[0], w, sms=4, path="gemv"), PS.prepare(states[1], w, programs=1, sms=4),
             PS.prepare(states[2], w, programs=5, stepped=True, sms=4)]
    out: dict[str, Any] = {"launches": [len(p.launches) for p in plans], "identical": [], "barrier_zero": []}
    for _ in range(3):
        logits = [p().clone() for p in plans]
        out["identical"].append([torch.equal(logits[0], x) and all(
            torch.equal(a, b) for a, b in zip(states[0].buffers().values(), st.buffers().values()))
            for x, st in zip(logits[1:], states[1:])])
        out["barrier_zero"].append([int(p.workspace.barrier.abs().sum()) == 0 for p in plans[1:]])
    out["reason"] = plans[1].path_reason
    return out


@case
def case_plans() -> dict[str, Any]:
    """fused_step(state, weights): one plan per state, made on first use and dropped with the state."""
    import gc

    from lab.step import decode as D
    from lab.step.fused import check as K, step as S

    tiny = K.weights_for("tiny")
    C.DEFAULT_SMS = 2  # no device here: small grids for the interpreter (this worker only)
    state = D.new_state(tiny, 3, 12)
    D.prefill(state, tiny, K.prompt_for(3, 4, 512))
    S.fused_step(state, tiny)
    plan = S.plan_for(state, tiny)
    S.fused_step(state, tiny)
    reused = S.plan_for(state, tiny) is plan and int(state.pos.item()) == 6 and plan.sms == 2
    try:
        S.fused_step(D.new_state(tiny, 3, 12), plan)
        wrong_state = None
    except ValueError as exc:
        wrong_state = str(exc)
    key = (id(state), False, False)
    del state, plan
    gc.collect()
    return {"reused": reused, "wrong_state": wrong_state, "dropped": key not in S._PLANS}


@case
def case_gelu() -> dict[str, Any]:
    """`rows._gelu` both ways (through gelu_kernel's FAST switch) over a dense range and the extremes, against the tanh
    GELU in float64 written as x sigmoid(2u) (torch's 0.5 x (1 + tanh u) cancels to 0 below about -7): each form's
    largest error relative to max(|GELU|, 1e-30), over |x| <= 3 and over everything (where the fp32 exponent's own
    rounding, about 40 ulp of u near x = -9, sets the error of any fp32 form), and torch's own GELU over |x| <= 3."""
    import torch

    from lab.step.fused.rows import gelu_kernel

    x = torch.cat([torch.linspace(-10, 10, 2001), torch.tensor([-1e4, -100.0, -30.0, -1e-3, -1e-30, 0.0, 1e-30, 1e-3,
                                                                30.0, 100.0, 1e4])])
    xd = x.double()
    ref = xd / (1 + torch.exp(-2 * 0.7978845608028654 * (xd + 0.044715 * xd ** 3)))
    core = xd.abs() <= 3
    out = {"torch_core": ((torch.nn.functional.gelu(xd, approximate="tanh") - ref)[core].abs()
                          / ref[core].abs().clamp_min(1e-30)).max().item()}
    for fast in (False, True):
        h = x.clone()
        gelu_kernel[(-(-h.numel() // 256),)](h, h.numel(), BLOCK=256, USE_PDL=False, FAST=fast)
        rel = (h.double() - ref).abs() / ref.abs().clamp_min(1e-30)
        out["fast" if fast else "exact"] = {"core": rel[core].max().item(), "all": rel.max().item()}
    return out


if TRITON_MISSING is None:
    import triton
    import triton.language as tl

    from lab.step.fused.attention import _qkv_block_row

    @triton.jit
    def _qkv_block_rows_kernel(out_ptr, E: tl.constexpr, DH: tl.constexpr, BN: tl.constexpr, HEAD_MAJOR: tl.constexpr):
        row, h = _qkv_block_row(tl.program_id(0), E, DH, BN, HEAD_MAJOR)
        tl.store(out_ptr + 2 * tl.program_id(0), row)
        tl.store(out_ptr + 2 * tl.program_id(0) + 1, h)


HEAD_MAJOR_SHAPES = ((64, 16, 8), (48, 12, 4), (1600, 64, 8), (768, 64, 16))  # (E, DH, BN): tiny, odd, GPT-2s


@case
def case_head_major_rows() -> dict[str, Any]:
    """ln_qkv's two orders (attention._qkv_block_row): each row block's first row and head, by program; head by head
    under the key E,DH,BN and in the q-K-V order under E,DH,BN,qkv."""
    import torch

    out = {}
    for E, DH, BN in HEAD_MAJOR_SHAPES:
        for head_major, key in ((True, f"{E},{DH},{BN}"), (False, f"{E},{DH},{BN},qkv")):
            rows = torch.full((3 * E // BN, 2), -1, dtype=torch.int32)
            _qkv_block_rows_kernel[(rows.shape[0],)](rows, E, DH, BN, head_major)
            out[key] = rows.tolist()
    return out


# what each kernel writes (its output in the workspace of a repeatable plan), for the anatomy case
WRITES = {"ln_qkv": "q", "attention": "part_o", "proj": "x_scratch", "ln_fc": "h", "fc2": "x_scratch",
          "lm_head": "logits"}


@case
def case_anatomy() -> dict[str, Any]:
    """Each kernel's variants (lab.step.fused.anatomy; not PDL's: the interpreter has no grid dependency) from the
    same inputs, its output poisoned first: what each wrote against what the step's own launch writes."""
    import torch

    from lab.step import decode as D
    from lab.step.fused import anatomy as A, check as K, stages as ST, step as S

    w = K.weights_for("tiny")
    state = D.new_state(w, 1, MAX_LEN)
    D.prefill(state, w, K.prompt_for(1, 4, 512))
    plan = S.prepare(state, w, sms=2, overrides=_heuristic("tiny", 1), repeatable=True, path="gemv")
    plan()
    out: dict[str, Any] = {}
    for name, launch in A.bound(plan).items():
        tensors = [a for a in launch.args if isinstance(a, torch.Tensor)]
        start = [t.clone() for t in tensors]
        target = getattr(plan.workspace, WRITES[name])

        def ran(run: Any) -> torch.Tensor:
            for t, s in zip(tensors, start):
                t.copy_(s)
            target.fill_(float("nan"))
            run()
            return target.clone()

        want = ran(launch)
        for v in ST.VARIANTS:
            if not v.pdl and ST.applies(name, v):
                got = ran(A.made(launch, v))
                out[f"{name}:{v.name}"] = ("equal" if torch.equal(got, want) else "unwritten" if got.isnan().all()
                                           else "other" if got.isfinite().all() else "partly")
        ran(launch)  # what the step's launch leaves, for the kernels after it
    return out


@case
def case_anatomy_experiment() -> dict[str, Any]:
    """lab.experiments.fused_anatomy's run end to end on the tiny model, with what needs CUDA faked (the device, its
    L2, the copy bandwidth, PDL, graph capture: the series is called instead of replayed): what it records."""
    import types
    import weakref
    from unittest import mock

    from lab.experiments import fused_anatomy as FA
    from lab.contract.profiles import SHAPES
    from lab.experiments.common.sweep import random_weights
    from lab.measure.timing import HostClock

    def weak_capture(fn: Any, warmup: int) -> Any:  # as a CUDA graph: it keeps no reference to what it replays
        ref = weakref.ref(fn)

        def replay() -> None:
            alive = ref()
            if alive is None:
                raise RuntimeError("a graph replayed a series its experiment no longer holds (freed inputs)")
            alive()

        return types.SimpleNamespace(replay=replay)

    recorded: list[Any] = []
    ctx = types.SimpleNamespace(
        options=FA.Options(dtypes=("float32",), max_len=MAX_LEN, repeats=1, iters=1, rounds=2, warmup=0),
        device=types.SimpleNamespace(type="cuda"), clock=HostClock(),
        skip=lambda item, code, message: recorded.append(["skip", item, str(code)]),
        check=lambda name, ok, **p: recorded.append(["check", name, ok]),
        activity=lambda what: mock.MagicMock(), metric=lambda spec, value, **p: recorded.append(
            [spec.name, p["kernel"], p["part"], value]),
        timing=lambda spec, rounds, **p: recorded.append([spec.name, p.get("kernel", p.get("method")), p["variant"],
                                                          len(rounds)]))
    with mock.patch.object(FA, "random_weights", lambda spec, dev, dtype: random_weights(SHAPES["tiny-2L"], "cpu",
                                                                                        dtype)), \
            mock.patch.object(FA, "copy_bandwidth", lambda ctx: 100.0), \
            mock.patch.object(FA, "free_device_memory", lambda dev: None), \
            mock.patch("lab.step.capture.capture", weak_capture), \
            mock.patch("lab.step.fused.step.pdl_supported", lambda dev: (False, "no PDL on this host")), \
            mock.patch("torch.cuda.get_device_properties", lambda dev: types.SimpleNamespace(L2_cache_size=1 << 16)), \
            mock.patch.object(C, "DEFAULT_SMS", 2), mock.patch.dict(C.TUNED, clear=True):  # the heuristics: small tiles
        FA.run(ctx)  # type: ignore[arg-type]
    return {"recorded": recorded}


def serve() -> None:
    """The worker: one case name a line on stdin, one JSON line back ({"result": ...} or {"error": ...})."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything a case prints goes to stderr, not into the answers
    for line in sys.stdin:
        name = line.strip()
        try:
            reply: dict[str, Any] = {"result": CASES[name]()}
        except BaseException:  # noqa: BLE001 -- the test that asked reports it
            reply = {"error": traceback.format_exc()[-4000:]}
        answer.write(json.dumps(reply) + "\n")
        answer.flush()


# ------------------------------------------------------------------ the tests (in pytest's process)

class Worker:
    """The interpreter worker process, started on first use and again after one dies or overruns."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.err: Any = None

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
        self.err = tempfile.TemporaryFile(mode="w+")
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"], cwd=ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)

    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-3000:]

    def run(self, name: str) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(name + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], CASE_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            proc.wait()
            self.proc = None
            pytest.fail(f"interpreter case {name}: no answer ({'died' if ready else f'over {CASE_TIMEOUT_S} s'}); "
                        f"stderr:\n{self._stderr()}")
        reply = json.loads(line)
        if "error" in reply:
            pytest.fail(f"interpreter case {name} raised:\n{reply['error']}")
        return reply["result"]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


FP32_CASES = {  # case -> (path, batch)
    "gemv-fp32-b1": ("gemv", 1), "gemv-fp32-b3": ("gemv", 3), "gemv-fp32-b8": ("gemv", 8),
    "gemv-odd-b3": ("gemv", 3), "prefetch-fp32-b1": ("gemv-prefetch", 1), "prefetch-odd-b3": ("gemv-prefetch", 3),
    "prefetch-unfolded-fp32-b1": ("gemv-prefetch", 1), "prefetch-evict-fp32-b1": ("gemv-prefetch", 1),
    "gemm-fp32-b8": ("gemm", 8), "gemm-fp32-b1": ("gemm", 1), "gemm-odd-b9": ("gemm", 9),
    "gemm-forms-fp32-b8": ("gemm", 8), "persistent-fp32-b1": ("gemv", 1), "persistent-stepped-odd-b3": ("gemv", 3),
    "persistent-wide-odd": ("gemv", 3), "fold-fp32-b1": ("gemv-prefetch", 1), "fold-odd-b3": ("gemv", 3),
    "fold-head-major-odd-b3": ("gemv", 3), "fold-head-major-switched-fp32-b1": ("gemv-prefetch", 1),
    "lm-sum-once-odd": ("gemv", 3), "argmax-fold-odd": ("gemv", 3), "fold-argmax-fold-fp32-b1": ("gemv-prefetch", 1),
    "fold-pieces-odd-b1": ("gemv-prefetch", 1), "prefetch-pieces-unfolded-oddk-b1": ("gemv-prefetch", 1),
    "fold-pieces-flat-b1": ("gemv-prefetch", 1), "fold-older-first-odd-b3": ("gemv", 3),
    "fold-older-first-head-major-odd-b3": ("gemv", 3), "fold-older-first-fp32-b1": ("gemv-prefetch", 1),
    "fold-older-first-words-odd-b3": ("gemv", 3), "fold-older-first-words-head-major-odd-b3": ("gemv", 3),
    "fold-older-first-words-fp32-b1": ("gemv-prefetch", 1),
}
PERSISTENT_LAUNCHES = {"persistent-fp32-b1": 2 + 2, "persistent-stepped-odd-b3": 5 * 2 + 2,
                       "persistent-wide-odd": 2 + 2}  # a launch a layer
BF16_CASES = {"gemv-bf16-b2": ("gemv", 2), "prefetch-bf16-b1": ("gemv-prefetch", 1), "gemm-bf16-b8": ("gemm", 8),
              "gemm-bf16-b1": ("gemm", 1), "fold-bf16-b1": ("gemv-prefetch", 1),
              "prefetch-oddk-bf16-b1": ("gemv-prefetch", 1), "prefetch-sum-once-bf16-b1": ("gemv-prefetch", 1),
              "residual-bf16-b2": ("gemv", 2), "fold-residual-bf16-b1": ("gemv-prefetch", 1),
              "fold-argmax-fold-bf16-b1": ("gemv-prefetch", 1), "fold-pieces-odd-bf16-b1": ("gemv-prefetch", 1),
              "fold-pieces-flat-bf16-b1": ("gemv-prefetch", 1), "fold-older-first-bf16-b1": ("gemv-prefetch", 1),
              "fold-older-first-words-bf16-b1": ("gemv-prefetch", 1)}


# every case: 3 s or more on an idle 2-core machine, as pyproject.toml's `slow` marker says (the first case run
# also starts the worker, ~5 s more), up to 30 s under load
SLOW = set(FP32_CASES) | set(BF16_CASES)


def _params(cases: dict) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in cases]


@pytest.mark.parametrize("name", _params(FP32_CASES))
def test_fp32_equals_eager(worker: Worker, name: str) -> None:
    run = worker.run(name)
    path, batch = FP32_CASES[name]
    assert (run["path"], run["batch"]) == (path, batch), run
    assert run["prefetch"] == (path == "gemv-prefetch"), run
    assert run["fold"] == name.startswith("fold-"), run  # taken where asked (and nowhere else: no PDL here)
    # the PREFETCH layer norms folded (configs.ln_fold) but where the case keeps them unfolded
    assert run["ln_fold"] == (path == "gemv-prefetch" and "unfolded" not in name), run
    assert run["head_major"] == ("head-major" in name), run  # configs.HEAD_MAJOR: no interpreter shape but where asked
    assert run["evict"] == ("evict" in name), run  # configs.EVICT_FIRST: likewise
    assert run["sum_once"] == ("sum-once" in name), run  # lm_head's SUM_ONCE, bound by name
    assert run["pieces"] == ("pieces" in name), run  # ln_qkv's and ln_fc's PIECES, likewise
    assert run["older_first"] == ("older-first" in name), run  # the folded attention's OLDER_FIRST, likewise
    assert run.get("argmax_fold", False) == ("argmax-fold" in name), run  # configs.ARGMAX_FOLD binds none: by name
    assert run.get("heads_zero", True), run  # a folding plan's heads' counters (and words) at zero after its steps
    if path == "gemv-prefetch":  # the variant computes its rows in one chunk
        for kernel in C.PREFETCH_KERNELS:
            odd = "odd" in name
            K = C.gemv_shapes(48 if odd else 64, 500 if odd else 512)[kernel][1]
            assert run["configs"][kernel]["BK"] == C.next_pow2(K), run["configs"]
    if name.endswith("odd-b3") and path == "gemv":
        assert run["configs"]["ln_qkv"]["BB"] == 2 and run["configs"]["ln_qkv"]["BN"] == (4 if run["fold"] else 16)
        assert run["fold"] or run["configs"]["attention"]["BS"] == 8
    if name == "gemm-odd-b9":
        assert run["configs"]["add_ln"]["BB"] == 2 and run["configs"]["block_argmax"]["BN"] == 64
    if name == "gemm-forms-fp32-b8":  # bound in the forms the fake measurement chose
        assert run["forms"] == [FORMS], run["forms"]
    assert_equal_run(run, FP32_REL, launches=PERSISTENT_LAUNCHES.get(name))


@pytest.mark.parametrize("name", _params(BF16_CASES))
def test_bf16_teacher_forced_within_bf16_rounding(worker: Worker, name: str) -> None:
    r = worker.run(name)
    assert r["dtype"] == "bfloat16" and len(r["fused_err"]) == 3 and r["path"] == BF16_CASES[name][0], r
    assert r["fold"] == name.startswith("fold-"), r
    assert r["ln_fold"] == (r["path"] == "gemv-prefetch"), r
    assert r["sum_once"] == ("sum-once" in name), r
    assert r["pieces"] == ("pieces" in name), r
    assert r["older_first"] == ("older-first" in name), r
    assert r["residual"] == ("bfloat16" if "residual" in name else "float32"), r
    assert r["argmax_fold"] == ("argmax-fold" in name), r
    assert r["kernels_per_step"] == launches_per_step(r, r["n_layer"]), r
    assert all(r["bookkeeping_ok"]), r
    for err, scale in zip(r["fused_err"], r["scale"]):
        assert err <= BF16_REL * scale, r
    assert max(r["fused_err"]) <= BF16_VS_EAGER * max(r["eager_err"]), r


@pytest.mark.slow
def test_fused_step_keeps_one_plan_per_state(worker: Worker) -> None:
    p = worker.run("plans")
    assert p["reused"] and p["dropped"], p
    assert p["wrong_state"] and "another DecodeState" in p["wrong_state"]


@pytest.mark.slow
def test_anatomy_variants_leave_out_their_stage_and_full_is_the_step_launch(worker: Worker) -> None:
    from lab.step.fused import stages as ST

    got = worker.run("anatomy")
    for key, outcome in got.items():
        variant = ST.BY_NAME[key.split(":")[1]]
        want = ("unwritten" if variant.idle or ST.Stage.STORE in variant.leave_out else "equal"
                if not variant.leave_out else "other")
        assert outcome == want, (key, got)
    assert {k.split(":")[0] for k in got} == set(ST.KERNELS) and len(got) == 6 * 7 - 1, got


@pytest.mark.slow
def test_anatomy_experiment_records_every_variant_and_stage(worker: Worker) -> None:
    from lab.step.fused import stages as ST

    got = worker.run("anatomy-experiment")["recorded"]
    checks = [r for r in got if r[0] == "check"]
    assert len(checks) == len(ST.KERNELS) and all(ok for _, _, ok in checks), checks
    assert [r for r in got if r[0] == "skip"] == [["skip", "the PDL variants (pdl, pdl_no_wait, pdl_idle)",
                                                   "not_on_this_device"]]
    timed = {(r[1], r[2]): r[3] for r in got if r[0] == "anatomy_us"}
    assert set(timed) == {(k, v.name) for k in ST.KERNELS for v in ST.VARIANTS if ST.applies(k, v) and not v.pdl}
    assert set(timed.values()) == {2}  # rounds kept
    stages = {(r[1], r[2]) for r in got if r[0] == "stage_us"}
    no_pdl = {p for p, pair in ST.PARTS.items() if not {"pdl", "pdl_no_wait"} & set(pair)}
    assert stages == {(k, p) for k in ST.KERNELS for p in no_pdl | {"stream_excess"}
                      if k != "attention" or p not in ("weights", "stream_excess")}, stages
    ends = [r for r in got if r[0] in ("stage_us_ci_low", "stage_us_ci_high")]
    assert len(ends) == 2 * len(stages) and all(isinstance(v, float) for *_, v in ends), ends
    # the whole step, as plain fused runs it where PDL cannot: every variant but no_wait (a PDL step's only)
    step = [r for r in got if r[0] == "anatomy_step_us"]
    assert step == [["anatomy_step_us", "fused", v.name, 2] for v in ST.STEP_VARIANTS if not v.pdl], step


@pytest.mark.slow
def test_persistent_plan_is_the_five_kernel_step_bit_for_bit_and_leaves_its_barrier_at_zero(worker: Worker) -> None:
    got = worker.run("persistent-exact")
    assert got["launches"] == [5 * 2 + 2, 2 + 2, 5 * 2 + 2], got
    assert got["identical"] == [[True, True]] * 3 and got["barrier_zero"] == [[True, True]] * 3, got
    assert "one persistent kernel a layer, 1 programs" in got["reason"], got


@pytest.mark.slow
def test_kv_at_once_leaves_the_folded_step_bit_for_bit_as_it_was(worker: Worker) -> None:
    got = worker.run("fold-kv-at-once-exact")
    assert got["fold"] == [True, True] and got["prefetch"] == [False, False], got
    assert got["bound"] == [[], ["ln_qkv:KV_AT_ONCE"] * 2], got  # layer 0's ln_qkv (it embeds) and layer 1's
    assert got["identical"] == [True] * 3, got


@pytest.mark.slow
@pytest.mark.parametrize("name", ["prefetch-at-once-exact", "prefetch-at-once-bf16-exact"])
def test_kv_and_res_at_once_leave_the_prefetch_step_bit_for_bit_as_it_was(worker: Worker, name: str) -> None:
    got = worker.run(name)
    assert got["fold"] == [True, True] and got["prefetch"] == [True, True], got
    assert got["bound"] == [[], ["fc2:RES_AT_ONCE"] * 2 + ["ln_qkv:KV_AT_ONCE"] * 2 + ["ln_qkv:POS_AT_ONCE"] * 2
                                 + ["proj:RES_AT_ONCE"] * 2], got  # sorted; each of the two layers
    assert got["identical"] == [True] * 3, got


@pytest.mark.slow
def test_older_first_in_words_is_older_first_in_memory_bit_for_bit(worker: Worker) -> None:
    got = worker.run("older-first-words-exact")
    assert got["fold"] == [True, True] and got["prefetch"] == [True, True], got
    assert got["bound"] == [["ln_qkv:OLDER_FIRST"] * 2] * 2, got  # both layers' ln_qkv, both plans (1, then 2)
    assert got["identical"] == [True] * 3, got


@pytest.mark.slow
def test_gelu_both_forms_match_torch_tanh_gelu(worker: Worker) -> None:
    """The fast form (constants folded into one power of two, the fast division) and the correctly rounded one agree
    with torch's tanh GELU to fp32 rounding in the interpreter, whose exp2 and division are numpy's; on a GPU the fast
    form's exp2 and division are within 2 ulp (the CUDA tests and the grid's token checks run it)."""
    got = worker.run("gelu")
    assert got["torch_core"] <= 1e-12, got  # the reference is torch's GELU where that does not cancel
    for form in ("exact", "fast"):
        assert got[form]["core"] <= 1e-6 and got[form]["all"] <= 2e-5, got


def test_head_major_order_covers_every_row_block_once_head_by_head_q_then_k_then_v(worker: Worker) -> None:
    got = worker.run("head-major-rows")
    for E, DH, BN in HEAD_MAJOR_SHAPES:
        blocks, per_head, per_part = got[f"{E},{DH},{BN}"], 3 * DH // BN, DH // BN
        rows = [row for row, _ in blocks]
        assert sorted(rows) == list(range(0, 3 * E, BN)), (E, DH, BN)  # every block of BN rows, once
        for i, (row, head) in enumerate(blocks):
            assert (row % E // DH, row // E) == (i // per_head, i % per_head // per_part), (E, DH, BN, i, row)
            assert head == row % E // DH, (E, DH, BN, i, row, head)  # the head its rows belong to
        # the q-K-V order: block i at row i * BN, of the head that row is in
        assert got[f"{E},{DH},{BN},qkv"] == [[i * BN, i * BN % E // DH] for i in range(3 * E // BN)]


@pytest.mark.slow
def test_a_plan_on_another_plans_buffers_computes_its_step_bit_for_bit(worker: Worker) -> None:
    """lab.step.fused.place's swapped plan (every own buffer another plan's) against a plan of its own, three steps."""
    got = worker.run("place-swapped-exact")
    assert got["fold"] == [True, True] and got["prefetch"] == [True, True], got
    assert {"x", "logits", "ln_qkv.c1_ptr", "ln_fc.c2_ptr"} <= set(got["buffers"]) and got["left"] == 0, got
    assert got["identical"] == [True] * 3, got


def test_every_case_has_a_test() -> None:
    assert set(CASES) == set(FP32_CASES) | set(BF16_CASES) | {"plans", "anatomy", "anatomy-experiment",
                                                              "persistent-exact", "gelu", "head-major-rows",
                                                              "fold-kv-at-once-exact", "prefetch-at-once-exact",
                                                              "prefetch-at-once-bf16-exact", "place-swapped-exact",
                                                              "older-first-words-exact"}


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
