"""Launch configurations of the fused step's kernels, and the bytes a step must move.

No Triton and no device needed here: the heuristics, the tuned table and the byte budget are plain
arithmetic over shapes, so tests and reports can use them anywhere.

Heuristics (used unless `TUNED` has an entry for the kernel, dtype, batch and model width):
- GEMV kernels: BB = batch rows per program (up to 4, so a weight tile fetched once serves them);
  BN = the largest power of two (<= 64) whose grid still has two programs per SM (at batch 1 a
  launch of fewer programs than SMs leaves bandwidth idle, and with one program per SM the SMs
  that get a second one set the time); one per SM for the projection, whose every program also
  combines the attention splits (more programs, more of that redundant work). BK = as much of K
  per chunk as keeps the product tile within ~64 fp32 registers a thread, so a program issues its
  whole tile's loads at once when K is small (768-wide rows go in one or two chunks).
- attention: split the cache so that batch x heads x splits covers the SMs, at most 4 splits (the
  projection kernel combines the splits in every program, so more splits cost it L2 reads).
- argmax: one program; as many batch rows per iteration as fit a 4096-element tile.

The `fused-pdl-prefetch` variant (kernels' PREFETCH switch) loads each program's whole weight slice
before its PDL wait, so its GEMV kernels other than lm_head need BK = next_pow2(K), one chunk:
`prefetch_config` turns any config into one (BN, then BB, halved until the slice fits 64 registers a
thread: 64 fp32 values, 128 bf16, which stay packed two to a register until used). lm_head keeps its
config: its 393 programs stream 77-154 MB in more than one wave, so only the first wave could
prefetch, and the kernel is already close to the copy rate. `TUNED_PREFETCH`
holds configs tuned that way (`python -m lab.step.fused.tune --pdl --prefetch`); until it has an entry,
the variant uses the tuned (or heuristic) config made one-chunk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

DEFAULT_SMS = 132  # an H200's (and an H100 SXM's) streaming multiprocessors, when no device says otherwise
MAX_BN = 64
MAX_SPLITS = 4
GEMV_KERNELS = ("ln_qkv", "proj", "ln_fc", "fc2", "lm_head")
KERNEL_NAMES = GEMV_KERNELS[:1] + ("attention",) + GEMV_KERNELS[1:] + ("argmax",)
ALL_KERNELS = "all"  # a switch bound on every launch whose kernel takes it (step.with_switches, the A/B tool's arms)


@dataclass(frozen=True)
class GemvConfig:
    BB: int  # batch rows per program
    BN: int  # output rows per program
    BK: int  # reduction columns per chunk
    num_warps: int = 4


@dataclass(frozen=True)
class AttentionConfig:
    BS: int  # cache slots per split
    num_warps: int = 4


@dataclass(frozen=True)
class ArgmaxConfig:
    BB: int  # batch rows per iteration of the single program
    num_warps: int = 4


@dataclass(frozen=True)
class RowConfig:
    BB: int  # batch rows per program
    BN: int  # columns (values) per program
    num_warps: int = 4


Config = GemvConfig | AttentionConfig | ArgmaxConfig | RowConfig
LIBRARY_KERNELS = ("add_ln", "attention", "combine", "gelu", "block_argmax", "argmax")  # the gemm path's Triton kernels

# Measured on an H200 by `python -m lab.step.fused.tune` (paste its printed dict here): keys are
# (kernel, dtype name, batch, model width n_embd), values the config fields. Anything absent uses the heuristics
# (a config tuned at one width is not another's: GPT-2 1.5B's 1600-wide rows take other tiles than 124M's 768).
# Measured on an NVIDIA H200 (132 SMs, torch 2.11, Triton 3.6), 2026-11-29, `python -m lab.step.fused.tune
# --batch 1`: the step at batch 1 went from 0.348 to 0.315 ms (fp32) and from 0.323 to 0.301 ms (bf16)
# with these configs, 0.267 / 0.268 ms with PDL on top.
TunedKey = tuple[str, str, int, int]  # (kernel, dtype name, batch, n_embd)
TUNED: dict[TunedKey, dict[str, int]] = {
    ('ln_qkv', 'float32', 1, 768): {'BB': 1, 'BN': 4, 'BK': 1024, 'num_warps': 2},
    ('proj', 'float32', 1, 768): {'BB': 1, 'BN': 8, 'BK': 1024, 'num_warps': 8},
    ('ln_fc', 'float32', 1, 768): {'BB': 1, 'BN': 4, 'BK': 1024, 'num_warps': 4},
    ('fc2', 'float32', 1, 768): {'BB': 1, 'BN': 1, 'BK': 4096, 'num_warps': 4},
    ('lm_head', 'float32', 1, 768): {'BB': 1, 'BN': 128, 'BK': 64, 'num_warps': 4},
    ('attention', 'float32', 1, 768): {'BS': 256, 'num_warps': 4},
    ('argmax', 'float32', 1, 768): {'BB': 1, 'num_warps': 8},
    ('ln_qkv', 'bfloat16', 1, 768): {'BB': 1, 'BN': 8, 'BK': 512, 'num_warps': 4},
    ('proj', 'bfloat16', 1, 768): {'BB': 1, 'BN': 4, 'BK': 1024, 'num_warps': 4},
    ('ln_fc', 'bfloat16', 1, 768): {'BB': 1, 'BN': 8, 'BK': 256, 'num_warps': 8},
    ('fc2', 'bfloat16', 1, 768): {'BB': 1, 'BN': 2, 'BK': 4096, 'num_warps': 4},
    ('lm_head', 'bfloat16', 1, 768): {'BB': 1, 'BN': 128, 'BK': 128, 'num_warps': 4},
    ('attention', 'bfloat16', 1, 768): {'BS': 128, 'num_warps': 4},
    ('argmax', 'bfloat16', 1, 768): {'BB': 1, 'num_warps': 8},
}


# Measured with `python -m lab.step.fused.tune --pdl --prefetch` (same keys as TUNED); where it has no entry the
# variant uses prefetch_config(TUNED or heuristic config). On an NVIDIA H200 (132 SMs, torch 2.11, Triton 3.6),
# 2026-12-03, `--size gpt2-124M` and `--size gpt2-1.5B`, `--batch 1 --dtype bfloat16 float32`: the step with
# PDL went to 0.2055 ms (124M bf16), 0.2326 (124M fp32), 1.7225 (1.5B bf16, from 2.03 with 124M's tiles) and
# 2.0801 (1.5B fp32), in the tuner's repeatable plan; retuned after the even/odd bf16 product
# (lab.step.fused.projections._dot_slice), 1.5B bf16 took 1.647 ms with the same tiles (the argmax's warps aside).
# ln_qkv retuned with the attention folded in (lab.step.fused.step.FOLD_WITH_PDL; 2026-12-03, every BN of 4-32 at
# 2, 4 and 8 warps, 5 rounds): 124M bf16 BN 32 at 8 warps (0.1877 ms a step against 0.2105 with the old BN 8 at 2
# warps, whose 64-slot chunks of the folded attention took two round trips at position 80), 1.5B fp32 BN 8 (2.0117
# against 2.0473 ms); the others kept theirs (124M fp32 0.2129 ms, 1.5B bf16 1.6103). Then 124M fp32 retuned whole
# with the layer norm's one-reduction statistics (`--size gpt2-124M --batch 1 --dtype float32 --pdl --prefetch`):
# proj BN 8 (its input one load of the folded attention's output, no longer a combine of splits: 768 one-row
# programs were too many) and fc2 BN 4 at 8 warps, 0.1965 ms a step in the tuner's timing (0.2122 with the tiles
# before); its other choices were within 0.1 us of the table's and were left as they were. bf16 retuned on 2026-12-04
# after its slices were read as packed pairs and the layer norm and GELU took fewer instructions (`--size gpt2-124M`
# and `--size gpt2-1.5B`, `--batch 1 --dtype bfloat16 --pdl --prefetch`): 124M 0.1788 ms a step (the old tiles with the
# new kernels: 0.1831), 1.5B 1.3935 ms (1.4367), in the tuner's timing. bf16 retuned again the same day after the pairs
# were read two to a thread (the input in the products' layout) and GELU's constants folded: 124M 0.1714 ms (ln_fc BN 2,
# lm_head BN 32 x BK 128, argmax 8 warps), 1.5B 1.3428 ms (ln_qkv BN 16, proj BN 2, fc2 one warp, the attention 64
# slots at 4 warps), in the tuner's timing; the old tiles with the new kernels took 0.1778 and 1.3687 ms there (A/B).
# Retuned once more after the layer norms were folded into ln_qkv's and ln_fc's products (configs.ln_fold; all four
# cases, `--dtype bfloat16 float32`): bf16 124M proj BN 2 at one warp and the attention 32 slots at 2 warps, 0.1695 ms
# a step; 1.5B ln_qkv BN 8 and lm_head BN 64, 1.2501 ms. Not taken: 1.5B bf16 ln_fc at one warp (1300 against 1337 us a
# step in that sweep: 512 values a thread, 255 registers and 28 bytes spilled, where the AOT checks allow no spill),
# and fp32's suggestions (1.5B: proj BN 2, ln_fc 4 warps, lm_head BN 128 x BK 64, attention 128 slots; 124M: ln_fc BN
# 4 at one warp and more): the tuner's fp32 step drifted by 2-3% within one sweep (the same 1.5B plan 1.961 and 1.970
# ms in an A/B that rejected the suggestions of the sweep before), and there was no device time left to A/B them.
# They were A/B-timed the next session (2026-12-04, one process, 5 rotated rounds of the repeatable plan): 1.5B fp32
# with proj BN 2, ln_fc at 4 warps and lm_head BN 128 x BK 64 took 0.981x the table's time (1.8726 against 1.9084 ms),
# so they are the table's now (the attention's slots do not apply: the PDL step folds the attention into ln_qkv).
# On 2026-12-05 (the same A/B, 8 rounds, at ec42659's kernels) 1.5B fp32's lm_head at BN 64 took 0.997x [0.996, 0.997]
# the table's BN 128 (1.8703 against 1.8762 ms); ln_qkv at 8 warps 1.050x, ln_fc at 8 warps 1.064x, fc2 at 4 warps
# 1.017x, proj BN 4 1.018x, the folded attention's chunk at 64 slots 1.033x, register caps 1.00-1.24x (docs/fused-step.md item 16).
# Later that day four more moves measured faster in one machine's A/B (d00efd9's kernels, 6-8 rounds): 1.5B fp32's
# lm_head at BK 128 0.995x and its argmax at 4 warps 0.996x, 124M fp32's argmax at 4 warps 0.993x, 1.5B bf16's lm_head
# at BK 256 0.994x. Bound and timed again on other machines of the same kind, they did not hold: against the old
# settings 1.5B fp32 took 1.004x on a second machine and 1.004x on a third (there in three processes, 1.004x in each),
# 124M fp32 1.007x and 1.5B bf16 0.999x on the third. So they are not bound: at batch 1 a move under about 1% must
# hold on two machines (docs/fused-step.md item 17).
TUNED_PREFETCH: dict[TunedKey, dict[str, int]] = {
    ('ln_qkv', 'bfloat16', 1, 768): {'BB': 1, 'BN': 8, 'BK': 1024, 'num_warps': 4},
    ('proj', 'bfloat16', 1, 768): {'BB': 1, 'BN': 2, 'BK': 1024, 'num_warps': 1},
    ('ln_fc', 'bfloat16', 1, 768): {'BB': 1, 'BN': 2, 'BK': 1024, 'num_warps': 4},
    ('fc2', 'bfloat16', 1, 768): {'BB': 1, 'BN': 2, 'BK': 4096, 'num_warps': 4},
    ('lm_head', 'bfloat16', 1, 768): {'BB': 1, 'BN': 32, 'BK': 128, 'num_warps': 4},
    ('attention', 'bfloat16', 1, 768): {'BS': 32, 'num_warps': 2},
    ('argmax', 'bfloat16', 1, 768): {'BB': 1, 'num_warps': 8},
    ('ln_qkv', 'float32', 1, 768): {'BB': 1, 'BN': 16, 'BK': 1024, 'num_warps': 4},
    ('proj', 'float32', 1, 768): {'BB': 1, 'BN': 8, 'BK': 1024, 'num_warps': 4},
    ('ln_fc', 'float32', 1, 768): {'BB': 1, 'BN': 8, 'BK': 1024, 'num_warps': 2},
    ('fc2', 'float32', 1, 768): {'BB': 1, 'BN': 4, 'BK': 4096, 'num_warps': 8},
    ('lm_head', 'float32', 1, 768): {'BB': 1, 'BN': 128, 'BK': 64, 'num_warps': 4},
    ('attention', 'float32', 1, 768): {'BS': 64, 'num_warps': 4},
    ('argmax', 'float32', 1, 768): {'BB': 1, 'num_warps': 2},
    ('ln_qkv', 'bfloat16', 1, 1600): {'BB': 1, 'BN': 8, 'BK': 2048, 'num_warps': 4},
    ('proj', 'bfloat16', 1, 1600): {'BB': 1, 'BN': 2, 'BK': 2048, 'num_warps': 4},
    ('ln_fc', 'bfloat16', 1, 1600): {'BB': 1, 'BN': 8, 'BK': 2048, 'num_warps': 4},
    ('fc2', 'bfloat16', 1, 1600): {'BB': 1, 'BN': 2, 'BK': 8192, 'num_warps': 1},
    ('lm_head', 'bfloat16', 1, 1600): {'BB': 1, 'BN': 64, 'BK': 128, 'num_warps': 4},
    ('attention', 'bfloat16', 1, 1600): {'BS': 64, 'num_warps': 4},
    ('argmax', 'bfloat16', 1, 1600): {'BB': 1, 'num_warps': 2},
    ('ln_qkv', 'float32', 1, 1600): {'BB': 1, 'BN': 8, 'BK': 2048, 'num_warps': 4},
    ('proj', 'float32', 1, 1600): {'BB': 1, 'BN': 2, 'BK': 2048, 'num_warps': 4},
    ('ln_fc', 'float32', 1, 1600): {'BB': 1, 'BN': 4, 'BK': 2048, 'num_warps': 4},
    ('fc2', 'float32', 1, 1600): {'BB': 1, 'BN': 2, 'BK': 8192, 'num_warps': 8},
    ('lm_head', 'float32', 1, 1600): {'BB': 1, 'BN': 64, 'BK': 64, 'num_warps': 8},
    ('attention', 'float32', 1, 1600): {'BS': 256, 'num_warps': 4},
    ('argmax', 'float32', 1, 1600): {'BB': 1, 'num_warps': 8},
}
PREFETCH_KERNELS = ("ln_qkv", "proj", "ln_fc", "fc2")  # the GEMV kernels with a PREFETCH path


def _shape(dtype: str, n_embd: int) -> tuple[str, int]:
    """A key of the per-shape tables below (LN_UNFOLDED, HEAD_MAJOR, EVICT_FIRST, KV_L2_FIRST): the dtype's name, the model
    width."""
    return dtype.removeprefix("torch."), n_embd


# Where the PREFETCH path keeps its layer norms unfolded (projections._ln_gemv_one; keys: dtype name, model width).
# Measured on an H200 (2026-12-04, the tuner's repeatable plans at batch 1, two alternations of 3 rounds of
# `do_bench_cudagraph` each, the folded and unfolded kernels in separate processes): folded, 124M bf16 took 0.986x
# the unfolded step's time, 1.5B bf16 0.965x and 1.5B fp32 0.977x, but 124M fp32 1.029x (retuned with the fold,
# 0.1975 ms against 0.192 unfolded), so that one keeps the unfolded form. A width not measured folds.
LN_UNFOLDED = {("float32", 768)}


def ln_fold(dtype: str, n_embd: int) -> bool:
    """Whether the PREFETCH kernels fold their layer norm into the product at this dtype and width (LN_UNFOLDED)."""
    return _shape(dtype, n_embd) not in LN_UNFOLDED


# Where the folded ln_qkv runs its programs head by head (attention._qkv_block_row; keys: dtype name, model width).
# Measured on an H200 (2026-12-04, the tuner's repeatable plan at batch 1 with PDL and the PREFETCH kernels, one process,
# 5 rotated rounds): head by head took 0.986x the step's time in the q-K-V order at GPT-2 1.5B bf16 (1.2577 against
# 1.2760 ms: ln_qkv's 600 programs are 1.14 waves, and in the q-K-V order every head's last program, and its attention,
# came in the last one), 1.002x at 1.5B fp32, 1.012x at 124M bf16 and 1.007x at 124M fp32 (one wave: nothing to gain,
# and each program's neighbours read rows a third of the matrix apart). A width not measured keeps the q-K-V order.
HEAD_MAJOR = {("bfloat16", 1600)}


def head_major(dtype: str, n_embd: int) -> bool:
    """Whether the folded ln_qkv runs its programs head by head at this dtype and width (HEAD_MAJOR)."""
    return _shape(dtype, n_embd) in HEAD_MAJOR


# Where the step's weight loads are marked to leave L2 first (EVICT: the PREFETCH kernels' slices and lm_head's tiles,
# projections._weights; keys: dtype name, model width). Measured on an H200 (2026-12-04, the tuner's repeatable plan
# at batch 1 with PDL and the PREFETCH kernels, one process, 5 rotated rounds; the step replayed from a CUDA graph step
# after step, as a decode runs it): every weight load marked took 0.945x the step's time at GPT-2 124M bf16, 0.965x at
# 124M fp32 and 0.991x at 1.5B bf16, but 1.045x at 1.5B fp32; the layers' loads alone 1.005x and lm_head's alone
# 1.003x at 124M bf16. A width not measured leaves the loads unmarked.
EVICT_FIRST = {("bfloat16", 768), ("float32", 768), ("bfloat16", 1600)}


def evict_first(dtype: str, n_embd: int) -> bool:
    """Whether the step marks its weight loads to leave L2 first at this dtype and width (EVICT_FIRST)."""
    return _shape(dtype, n_embd) in EVICT_FIRST


# Where lm_head's last program takes the argmax and advances the step, the argmax launch left out (step.prepare's
# `argmax_fold`, projections.lm_head_kernel's ARGMAX_FOLD; keys: dtype name, model width). Measured once, on an H200
# (2026-12-04, the kernels of d6eea0c, the repeatable plans in alternating rounds, 9 of each; docs/fused-step.md item 10): 2.3 µs a
# step less at GPT-2 1.5B fp32 and 5.5 µs in bf16 (0.999x and 0.997x), 1.8 µs more at 124M fp32 and 1.6 µs in bf16:
# the count-in of every lm_head program and the last one's reads back cost about what the launch did. Under 1% and on
# kernels since changed, so it binds no shape until an A/B with its A/A shows it on two machines
# (`python -m lab.step.fused.ab ... table "plan:ARGMAX_FOLD=1"`, docs/fused-step.md item 26). With today's kernels it
# is level: at all four shapes on an H100 (card 8dee1d14), at 1.5B on a second, and at 1.5B fp32 and bf16 on an H200
# (card 21b832cf, 2026-12-06: 1.000x [0.995, 1.004] and 1.000x [0.997, 1.003], item 27).
ARGMAX_FOLD: set[tuple[str, int]] = set()


def argmax_fold(dtype: str, n_embd: int) -> bool:
    """Whether lm_head's last program takes the argmax (no argmax launch) at this dtype and width (ARGMAX_FOLD)."""
    return _shape(dtype, n_embd) in ARGMAX_FOLD


# Where the folded ln_qkv asks L2 for its heads' K and V before its PDL wait (KV_L2: attention._kv_to_l2, on the
# gemv-prefetch path; keys: dtype name, model width). Measured on an H200 (2026-12-05, `python -m lab.step.fused.ab`:
# the repeatable plan at batch 1 with PDL and the PREFETCH kernels, one process, 5 rotated rounds): 0.954x the step's
# time at GPT-2 124M fp32 (0.1798 against 0.1885 ms) and 0.982x at 1.5B bf16 (1.2213 against 1.2432), but 1.009x at
# 124M bf16 and 0.997x [0.995, 1.002] at 1.5B fp32, which in a second A/B of 8 rounds took 0.999x [0.999, 1.000]
# (1.8751 against 1.8762 ms): faster by the lab's rule, by 0.1%. A width not measured asks for nothing.
KV_L2_FIRST = {("float32", 768), ("bfloat16", 1600), ("float32", 1600)}


def kv_l2(dtype: str, n_embd: int) -> bool:
    """Whether the folded ln_qkv asks L2 for its heads' K and V before its wait at this dtype and width (KV_L2_FIRST)."""
    return _shape(dtype, n_embd) in KV_L2_FIRST


# The tables above were measured on an NVIDIA H200 and are every card's. Some moves measured on one kind of card and
# not on another are bound on that card only, by the name CUDA gives the device (`device_card`; the CPU and Triton's
# interpreter have none, and take the tables above as they are).
H100_SXM = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"

# Where the folded ln_qkv asks for each chunk's K and V in one round trip (KV_AT_ONCE: attention._fold_attention, the
# scores read K through a select between K and V, so ptxas cannot issue V's loads after the scores), on the
# gemv-prefetch path; keys: card, dtype name, model width. Measured with `python -m lab.step.fused.ab --rounds 8
# --processes 2` (the repeatable plan at batch 1, PDL and the PREFETCH kernels, two fresh processes, 8 rotated rounds
# each). On three H100s (card eb131377 at 5d71e69's kernels, card 558c4acc at 8073839's, the kernels of now): at 1.5B bf16
# 0.980x [0.978, 0.981] and 0.981x the table's step, and about 0.994x on a third card (0fbf99b5, against another arm);
# at 124M fp32 0.987x [0.985, 0.990] and 0.991x; at 1.5B fp32 1.000x on both, at 124M bf16 0.999x and 0.997x (not
# bound). On an H200
# (card 3b817f1c, 2026-12-05) none held: 0.998x [0.995, 1.000] at 1.5B bf16, 0.999x at 124M fp32, 1.002x at 1.5B fp32,
# 1.012x at 124M bf16. A move under about 1% must hold on two cards (docs/fused-step.md item 17): these hold on two H100s. Timed
# at batch 1 and bound, like the per-shape tables above, at every batch the PREFETCH path takes (the same values).
KV_AT_ONCE_FIRST = {(H100_SXM, "bfloat16", 1600), (H100_SXM, "float32", 768)}


def kv_at_once(dtype: str, n_embd: int, card: str) -> bool:
    """Whether the folded ln_qkv asks for K and V in one round trip at this dtype and width on this card
    (KV_AT_ONCE_FIRST; `card` as device_card names it, "" for none)."""
    return (card, *_shape(dtype, n_embd)) in KV_AT_ONCE_FIRST


# Where lm_head sums its products over K once, after its last chunk, instead of once a chunk (SUM_ONCE:
# projections._ln_gemv, a tile of partial sums beside the accumulator: no shuffle in the loop, more registers), on the
# gemv-prefetch path; keys: card, dtype name, model width. Measured with `python -m lab.step.fused.ab --rounds 8
# --processes 2` (as KV_AT_ONCE above; the H100's table arm with KV_AT_ONCE bound) on two H100s: at 1.5B bf16 0.996x
# [0.996, 0.997] (card 2f2cab0a, 2026-12-05, each process 0.996x, 0.997x) and 0.996x [0.995, 0.997] (card 86fb4e20,
# 2026-12-06, 0.995x, 0.996x); bound, taking it off was 1.004x [1.004, 1.005] on a third (card 283cc3be) and 1.003x
# [1.001, 1.004] on a fourth (card ff5353a9). Not bound where it was slower or level on the first card: 124M fp32
# 1.010x, 124M bf16 1.008x (1.009x on the fourth), 1.5B fp32 1.000x. On one H200 (card 21b832cf, 2026-12-06, three
# processes) at 1.5B bf16 0.993x [0.991, 0.997] (0.997x, 0.992x, 0.991x; item 27), and on a second H200 (card
# 4c62a42a, 2026-12-07, lab 28cc65b, three processes) 0.993x [0.989, 0.996] (0.996x, 0.989x, 0.995x; item 32): bound
# on the H200 too, as on two cards (item 17). At 1.5B bf16 the PREFETCH path is taken at batch 1 only.
SUM_ONCE_FIRST = {(H100_SXM, "bfloat16", 1600), (H200, "bfloat16", 1600)}


def sum_once(dtype: str, n_embd: int, card: str) -> bool:
    """Whether lm_head sums over K once, after its loop, at this dtype and width on this card (SUM_ONCE_FIRST; `card`
    as device_card names it, "" for none)."""
    return (card, *_shape(dtype, n_embd)) in SUM_ONCE_FIRST


# Where the PREFETCH path's ln_qkv holds its row, weight slice and norm vectors in pieces whose widths are powers of two
# (PIECES: projections._piece, 1600 = 1024 + 512 + 64, the third held flat; no column padded to next_pow2, where one
# tile of 2048 pads 448), on the cards where that measured faster; keys: card, dtype name, model width. Ahead of time
# (sm_90) 1.5B fp32's ln_qkv then holds 164 registers a thread against 192: three 4-warp programs an SM, not two, its
# 600 programs in 1.52 waves, not 2.27 (`python -m lab.step.fused.aot` prints both). Measured with `python -m
# lab.step.fused.ab` on an H100 SXM (card 2b24f25c, 2026-12-07, lab be5970d, three A/Bs of 5-6 rounds in 2-3 processes):
# at 1.5B fp32 0.984x [0.980, 0.989], 0.984x [0.982, 0.988] and 0.983x [0.980, 0.987] the table's step, each process
# 0.980-0.988x, the A/As 0.997-1.000x. Not bound: 1.5B bf16 1.011x [1.003, 1.015] (its ln_qkv holds 128 registers
# either way), and there with a cap of 96 registers (five an SM, one wave, no spill) 1.065x; ln_fc's PIECES 1.000x in
# bf16 and, in fp32 at a cap of 96 (five an SM), 1.005x. At 124M the second piece is narrower than a program's warps
# span, and Triton moves its tiles through shared memory (not timed). On an H200 (card 4c62a42a, 2026-12-07, lab
# 28cc65b, 6 rounds in 3 processes) at 1.5B fp32 0.983x [0.981, 0.988] (0.988x, 0.982x, 0.981x; A/A 1.000x), at
# 1.5B bf16 1.002x: bound there too (docs/fused-step.md item 32).
PIECES_FIRST = {(H100_SXM, "float32", 1600), (H200, "float32", 1600)}


def pieces(dtype: str, n_embd: int, card: str) -> bool:
    """Whether the PREFETCH path's ln_qkv holds its row in pieces of powers of two at this dtype and width on this card
    (PIECES_FIRST; `card` as device_card names it, "" for none)."""
    return (card, *_shape(dtype, n_embd)) in PIECES_FIRST


# The PREFETCH path's tiles where a card measured others faster than TUNED_PREFETCH's (tuned on an H200); keys: card,
# kernel, dtype name, batch, model width; values as TUNED_PREFETCH's (the whole config). Found on an H100 SXM by
# `python -m lab.step.fused.tune --batch 1 --pdl --prefetch --from-table` (card 0e4c2277, 2026-12-06, lab 9f8e163: at
# 124M fp32 and 1.5B fp32 the descent from the table ended slower than the table) and A/B-timed with
# `python -m lab.step.fused.ab --rounds 8`: 1.5B bf16 proj at 2 warps 0.986x [0.985, 0.989] and 0.985x [0.983, 0.987]
# the table's step on that card (2 processes each), taking it off 1.009x [1.007, 1.010] on a second (card 9a07d692)
# and 1.006x [1.002, 1.010] on a third (card 5e5bef9c, 4 processes, each 1.001-1.011x; its A/A, a second plan of the
# same table, 1.000x [0.995, 1.006]: within it by the A/B's rule, docs/fused-step.md item 24). Not bound: 124M bf16's folded
# attention at 128 slots a chunk, 0.982-0.983x on the first card, then 0.980x *slower* than the H200's 32 on the second:
# at 124M bf16 on an H100 a second plan of the same table is 3.4% slower or faster by the order the plans were built
# in (0.967x / 1.034x, eight processes, card 5e5bef9c), which those A/Bs, without an A/A, took for the configs.
TUNED_PREFETCH_BY_CARD: dict[tuple[str, str, str, int, int], dict[str, int]] = {
    (H100_SXM, "proj", "bfloat16", 1, 1600): {"BB": 1, "BN": 2, "BK": 2048, "num_warps": 2},
}


def device_card(device: torch.device | str | None = None) -> str:
    """The name CUDA gives the device (e.g. "NVIDIA H100 80GB HBM3"), the key of the per-card tables; "" without a CUDA
    device (the CPU, Triton's interpreter)."""
    dev = _cuda(device)
    return "" if dev is None else str(torch.cuda.get_device_name(dev))


PREFETCH_TILE = 64  # fp32 values of a tile a thread may hold (64 registers; x 32 threads x num_warps per program)


def weight_tile(elem_bytes: int) -> int:
    """Values of a PREFETCH weight slice a thread may hold: PREFETCH_TILE registers' bytes (64 fp32, 128 bf16). The
    slice stays in the weights' dtype until it is used, two bf16 to a register, so counting values would give bf16
    half the bytes in flight of fp32 for the same registers."""
    return PREFETCH_TILE * 4 // elem_bytes


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _cuda(device: torch.device | str | None) -> torch.device | None:
    """`device` where it is a CUDA device this process can use, else None (the CPU, the interpreter, no device)."""
    dev = torch.device(device) if device is not None else None
    return dev if dev is not None and dev.type == "cuda" and torch.cuda.is_available() else None


def device_sms(device: torch.device | str | None = None) -> int:
    """Streaming multiprocessors of a CUDA device, DEFAULT_SMS without one (the interpreter, the CPU)."""
    dev = _cuda(device)
    return DEFAULT_SMS if dev is None else int(torch.cuda.get_device_properties(dev).multi_processor_count)


def gemv_shapes(n_embd: int, vocab: int) -> dict[str, tuple[int, int]]:
    """(out rows N, reduction K) of each GEMV kernel's matrix."""
    E, F = n_embd, 4 * n_embd
    return {"ln_qkv": (3 * E, E), "proj": (E, E), "ln_fc": (F, E), "fc2": (E, F), "lm_head": (vocab, E)}


def gemv_default(N: int, K: int, batch: int, sms: int, per_sm: int = 2, num_warps: int = 4) -> GemvConfig:
    BB = min(next_pow2(batch), 4)
    nbb = cdiv(batch, BB)
    BN = MAX_BN
    while BN > 1 and cdiv(N, BN) * nbb < per_sm * sms:
        BN //= 2
    budget = 64 * 32 * num_warps  # weight-tile elements: ~64 registers a thread
    return GemvConfig(BB, BN, max(16, min(next_pow2(K), budget // (BB * BN))), num_warps)


def attention_default(batch: int, n_head: int, max_len: int, sms: int) -> AttentionConfig:
    splits = min(next_pow2(cdiv(sms, batch * n_head)), MAX_SPLITS, max(1, next_pow2(max_len) // 16))
    return AttentionConfig(BS=max(16, next_pow2(cdiv(max_len, splits))))


def argmax_default(batch: int, n_blocks: int) -> ArgmaxConfig:
    return ArgmaxConfig(BB=max(1, min(next_pow2(batch), 4096 // next_pow2(n_blocks))))


def prefetch_config(cfg: GemvConfig, K: int, act_tiles: int = 1, elem_bytes: int = 4) -> GemvConfig:
    """`cfg` made one chunk (BK = next_pow2(K)), BN then BB halved until the weight slice fits the tile budget
    (`weight_tile` of the weights' `elem_bytes`), and BB until the `act_tiles` fp32 activation tiles [BB, BK] the
    kernel holds do (the projection combines the attention splits in four: running max, numerator, denominator,
    result)."""
    BK = next_pow2(K)
    BB, BN, warps = cfg.BB, cfg.BN, cfg.num_warps
    w_tile = weight_tile(elem_bytes)
    while BB * BN * BK > w_tile * 32 * warps and BN > 1:
        BN //= 2
    while (BB * BN * BK > w_tile * 32 * warps or BB * BK * act_tiles > PREFETCH_TILE * 32 * warps) and BB > 1:
        BB //= 2
    while BB * BN * BK > w_tile * 32 * warps and warps < 16:
        warps *= 2
    return GemvConfig(BB, BN, BK, warps)


def attention_early(cfg: AttentionConfig, head_dim: int) -> bool:
    """Whether the prefetch variant's attention loads K and V of its whole split at once (the EARLY path):
    only when both tiles fit the tile budget, so that holding them does not spill."""
    return cfg.BS * next_pow2(head_dim) <= PREFETCH_TILE * 32 * cfg.num_warps


def fold_refusal(cfg: Config, head_dim: int) -> str:
    """Why ln_qkv with this config cannot fold the attention in (lab.step.fused.attention._fold_attention), or "":
    each of its programs must hold one part (q, K or V) of one head, so BN must divide the head's width."""
    if not isinstance(cfg, GemvConfig):
        return f"ln_qkv's config is not a GEMV config ({cfg})"
    if head_dim % cfg.BN:
        return f"ln_qkv's BN {cfg.BN} does not divide the head's width {head_dim}"
    return ""


def fold_slots(max_len: int, head_dim: int, num_warps: int) -> int:
    """Cache slots per chunk of the folded attention: K's and V's tiles [BS, next_pow2(head_dim)] within the tile
    budget (PREFETCH_TILE values a thread each), no more than the cache holds, at least 16."""
    fit = PREFETCH_TILE * 32 * num_warps // next_pow2(head_dim)
    return max(16, min(next_pow2(max_len), 1 << max(0, fit.bit_length() - 1)))


def one_chunk(name: str, cfg: Config, K: int) -> bool:
    """Whether a PREFETCH kernel's config reads its row in one chunk (what that path computes with)."""
    return isinstance(cfg, GemvConfig) and cfg.BK == next_pow2(K)


def choose(n_embd: int, n_head: int, vocab: int, max_len: int, batch: int, dtype: torch.dtype, sms: int,
           overrides: dict[str, Config] | None = None,
           tuned: dict[TunedKey, dict[str, int]] | None = None,
           prefetch: bool = False, card: str = "") -> dict[str, Config]:
    """Every kernel's config: explicit overrides, else the tuned table, else the heuristics.

    `prefetch`: the PREFETCH variant's configs: TUNED_PREFETCH_BY_CARD's for this `card` (as device_card names it, ""
    for none) where it has an entry, else TUNED_PREFETCH's (for every kernel: lm_head, attention and the argmax are
    tuned beside the PREFETCH kernels), else the above, the PREFETCH kernels' made one chunk by `prefetch_config` (an
    override must already be one chunk). `tuned` given (the tuner's {}): no table, neither the card's.
    """
    overrides = overrides or {}
    dname = str(dtype).removeprefix("torch.")
    if prefetch:
        shapes = gemv_shapes(n_embd, vocab)
        for name in PREFETCH_KERNELS:
            if name in overrides and not one_chunk(name, overrides[name], shapes[name][1]):
                raise ValueError(f"fused step config {name}: the prefetch variant needs BK = "
                                 f"{next_pow2(shapes[name][1])} (one chunk), got {overrides[name]}")
        out = choose(n_embd, n_head, vocab, max_len, batch, dtype, sms, overrides, tuned)
        table = TUNED_PREFETCH if tuned is None else {}
        by_card = TUNED_PREFETCH_BY_CARD if tuned is None else {}
        for name in out:
            if name in overrides:
                continue
            entry = by_card.get((card, name, dname, batch, n_embd)) or table.get((name, dname, batch, n_embd))
            if name not in PREFETCH_KERNELS:  # lm_head, attention, argmax: as tuned beside the PREFETCH kernels
                if entry:
                    out[name] = type(out[name])(**entry)
                continue
            g = out[name]
            assert isinstance(g, GemvConfig)
            out[name] = GemvConfig(**entry) if entry else prefetch_config(g, shapes[name][1],
                                                                          4 if name == "proj" else 1, dtype.itemsize)
            if not one_chunk(name, out[name], shapes[name][1]):
                raise ValueError(f"TUNED_PREFETCH[{name!r}, {dname!r}, {batch}, {n_embd}]: BK must be "
                                 f"{next_pow2(shapes[name][1])} (one chunk), got {out[name]}")
        return _checked(out)
    tuned = TUNED if tuned is None else tuned

    def pick(name: str, kind: type, default: Any) -> Any:
        if name in overrides:
            return overrides[name]
        entry = tuned.get((name, dname, batch, n_embd))
        return kind(**entry) if entry else default()

    out: dict[str, Config] = {}
    for name, (N, K) in gemv_shapes(n_embd, vocab).items():
        per_sm = 1 if name == "proj" else 2
        out[name] = pick(name, GemvConfig, lambda: gemv_default(N, K, batch, sms, per_sm))
    out["attention"] = pick("attention", AttentionConfig, lambda: attention_default(batch, n_head, max_len, sms))
    blocks = cdiv(vocab, out["lm_head"].BN)  # type: ignore[union-attr]
    out["argmax"] = pick("argmax", ArgmaxConfig, lambda: argmax_default(batch, blocks))
    return _checked(out)


def choose_library(n_embd: int, n_head: int, vocab: int, max_len: int, batch: int, sms: int,
                   overrides: dict[str, Config] | None = None) -> dict[str, Config]:
    """The gemm path's Triton kernels' configs (lab.step.fused.library): row kernels one batch row a
    program (whole rows for the layer norm), attention split as on the gemv path, the logits' argmax
    in at least 8 blocks of at most 2048 (several programs per row, each a few KB)."""
    E = next_pow2(n_embd)
    out: dict[str, Config] = {
        "add_ln": RowConfig(1, E), "attention": attention_default(batch, n_head, max_len, sms),
        "combine": RowConfig(1, min(256, E)), "gelu": RowConfig(1, 1024),
        "block_argmax": RowConfig(1, min(2048, max(16, next_pow2(cdiv(vocab, 8)))))}
    unknown = sorted(set(overrides or {}) - set(LIBRARY_KERNELS))
    if unknown:
        raise ValueError(f"fused step config {unknown[0]}: not a kernel of the gemm path ({', '.join(LIBRARY_KERNELS)})")
    out.update({k: v for k, v in (overrides or {}).items() if k != "argmax"})
    if out["add_ln"].BN < n_embd:  # type: ignore[union-attr]
        raise ValueError(f"fused step config add_ln: BN must cover a row ({E}), got {out['add_ln']}")
    blocks = cdiv(vocab, out["block_argmax"].BN)  # type: ignore[union-attr]
    out["argmax"] = (overrides or {}).get("argmax") or argmax_default(batch, blocks)
    return _checked(out)


def _checked(out: dict[str, Config]) -> dict[str, Config]:
    for name, cfg in out.items():
        bad = [k for k, v in asdict(cfg).items() if k != "num_warps" and (v < 1 or v & (v - 1))]
        if bad:
            raise ValueError(f"fused step config {name}: {', '.join(bad)} must be powers of two ({cfg})")
    return out


# ------------------------------------------------------------------------------ the byte budget

@dataclass(frozen=True)
class KernelBytes:
    """What one kernel of the step moves per step (all its launches), in bytes."""

    kernel: str
    launches: int
    weights: int  # weight bytes (each read once from HBM: the floor)
    cache: int  # KV-cache bytes read and written
    activations: int  # other reads and writes (residual, q, h, partials, logits, tokens), once each


def byte_budget(n_layer: int, n_embd: int, n_head: int, vocab: int, batch: int, weight_bytes: int,
                reached_slots: int, n_splits: int, lm_blocks: int) -> list[KernelBytes]:
    """Bytes per step of each kernel kind of the GEMV path; `reached_slots` = pos + 1, the cache slots attention
    reads. The per-call bytes are lab.step.fused.traffic's (declared there once), summed over the step's calls.

    Activations are counted once each (the fp32 workspace); programs that re-read a row from L2
    are not counted, since the floor is set by what must come from HBM.
    """
    from lab.step.fused import traffic

    shape = traffic.Shape(n_layer, n_embd, n_head, vocab, batch, weight_bytes, max_len=reached_slots)
    step = traffic.calls(shape, traffic.Layout("gemv", n_splits, lm_blocks), position=reached_slots - 1)
    return [KernelBytes(k.kernel, k.calls, k.weights, k.kv, k.activations) for k in traffic.per_kernel(step)]


def budget_summary(rows: list[KernelBytes], bandwidth_gbs: float) -> dict[str, Any]:
    """Totals and the time floor at a copy bandwidth (GB/s): the bytes, not the launches."""
    weights = sum(r.weights for r in rows)
    total = sum(r.weights + r.cache + r.activations for r in rows)
    return {"kernels": sum(r.launches for r in rows), "weight_bytes": weights, "total_bytes": total,
            "weight_floor_ms": weights / bandwidth_gbs / 1e6, "floor_ms": total / bandwidth_gbs / 1e6}
