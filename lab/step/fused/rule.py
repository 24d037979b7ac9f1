"""Which projection path the fused step takes at a (batch, model size, dtype): the declared rule and its reasons.

Two paths compute the same step (lab.step.fused.step):

- `gemv`: the row-block GEMV kernels (lab.step.fused.projections), 5 launches a layer with all the row
  work fused in. A program serves at most 4 batch rows (configs.gemv_default's BB), so from batch 8 up
  every weight tile is read once per 4-row tile; with no tensor cores the half-precision products run
  on the FMA units too.
- `gemm`: the library's GEMMs (`torch.addmm` / `torch.mm`: cuBLAS on CUDA, the same calls as the eager
  step's `F.linear`) in the same captured graph, with the fused Triton row kernels around them (the
  residual add + layer norm, attention with the cache write, the split combine, GELU, the argmax):
  9 launches a layer. The GEMMs read each weight once for the whole batch and use tensor cores in
  bf16 (in fp32 cuBLAS keeps IEEE fp32 unless TF32 is allowed, which the lab leaves off: an fp32
  method using TF32 would be another method).

On the gemm path, how each projection calls the library is chosen when the plan is built
(lab.step.fused.layout, lab.step.fused.library.choose_forms): cuBLASLt with the bias in its epilogue or
the plain cuBLAS GEMM, on the weight as stored or on a contiguous transposed copy, timed per projection
with CUDA events on the device (the declared default, today's `F.linear`-like calls, elsewhere), the
choice and every candidate's median kept in the `fused_layouts` note. Why: on the H200 (2026-12-01,
GPT-2 124M fp32, B=16) the default calls landed on `cutlass_80_simt_sgemm_64x64_8x5_tn` (24 calls,
1080 us) and gemmSN_TN (24 calls, 318 us), and the fused step took 1.756 ms against compile+graph's
1.105, whose calls of the same products landed on other cuBLAS kernels; at B=64 2.04 against 1.73.
What the measured choice gains is unmeasured until an H200 run; the thresholds below were measured
with the default calls.

`gemv-prefetch` is the gemv path with the PREFETCH kernels (`fused-pdl-prefetch`), taken only where it
pays: where every PREFETCH kernel's one-chunk config (configs.prefetch_config) still serves the whole
batch in one row tile, so no weight slice is read twice; elsewhere the variant runs the path the rule
gives without prefetch (at 1.5B bf16 B=64 the prefetch configs' single-row tiles re-read the weights
per row: 119.5 ms a step against 25.2 for plain `fused`).

The thresholds (`THRESHOLDS`, first matching row wins) with the measurements behind them, on an
H200, 2026-12-01, `model_scaling` with random weights (ms per step, fused GEMV vs graph replay of the
eager step): 1.5B bf16 B=8 4.74 vs 3.98, B=64 25.2 vs 5.88; 774M fp32 B=64 13.6 vs 12.6; 124M fp32
B=64 2.29 vs 2.54 but against compile+graph's 1.73, whose GEMMs are the library's too. No batch
between 1 and 8 was measured: the rule takes the GEMV's structure (one row tile up to 4 rows) as the
boundary, to be settled by a GPU run of both paths: `prepare(..., path="gemv" | "gemm")` forces one
(`python -m lab.step.fused.check --path`, `python -m lab.step.fused.aot --path` take it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Path(StrEnum):
    GEMV = "gemv"
    GEMV_PREFETCH = "gemv-prefetch"
    GEMM = "gemm"


@dataclass(frozen=True)
class Threshold:
    """From `gemm_from_batch` up, `dtype` models of width >= `min_n_embd` take the gemm path."""

    dtype: str
    min_n_embd: int
    gemm_from_batch: int
    reason: str


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("bfloat16", 0, 8, "bf16 GEMV slower than graph replay from B=8 (1.5B: 4.74 vs 3.98 ms at B=8, "
                                "25.2 vs 5.88 at B=64): cuBLAS's tensor-core GEMMs read each weight once"),
    Threshold("float16", 0, 8, "as bf16: half-precision GEMMs on tensor cores (fp16 not measured separately)"),
    Threshold("float32", 0, 8, "fp32 GEMV at B=64 slower than graph replay at 774M (13.6 vs 12.6 ms) and than "
                               "compile+graph at 124M (2.29 vs 1.73): from B=8 each weight tile is read per "
                               "4-row tile"),
)


@dataclass(frozen=True)
class Choice:
    path: Path
    reason: str


def projection_path(batch: int, n_embd: int, dtype: str) -> Choice:
    """The rule: the gemm path from the first matching threshold's batch up, else the gemv path."""
    dtype = dtype.removeprefix("torch.")
    for t in THRESHOLDS:
        if t.dtype == dtype and n_embd >= t.min_n_embd:
            if batch >= t.gemm_from_batch:
                return Choice(Path.GEMM, f"batch {batch} >= {t.gemm_from_batch} ({dtype}): {t.reason}")
            return Choice(Path.GEMV, f"batch {batch} < {t.gemm_from_batch} ({dtype}): one row tile of the GEMV "
                                     "kernels serves the batch")
    return Choice(Path.GEMV, f"no threshold declared for {dtype}: the GEMV kernels")


def prefetch_pays(batch: int, row_tiles: dict[str, int]) -> tuple[bool, str]:
    """Whether the PREFETCH kernels pay at `batch`: each one-chunk config's row tile (BB) covers the batch."""
    short = {name: bb for name, bb in row_tiles.items() if bb < batch}
    if short:
        name, bb = next(iter(short.items()))
        return False, (f"prefetch declined at batch {batch}: its one-chunk {name} config holds {bb} row(s) a "
                       f"program, so each weight slice would be read {-(-batch // bb)} times")
    return True, f"prefetch: every one-chunk config serves the {batch} row(s) in one tile"


def choose(batch: int, n_embd: int, dtype: str, prefetch: bool, row_tiles: dict[str, int] | None = None,
           forced: Path | str | None = None) -> Choice:
    """The path a plan takes. `prefetch`: the variant asks for the PREFETCH kernels, `row_tiles` their
    one-chunk configs' BB per kernel; `forced`: a path named by the caller (tests, the tuner)."""
    if forced is not None:
        path = Path(forced)
        if path == Path.GEMV and prefetch:
            path = Path.GEMV_PREFETCH
        if path == Path.GEMV_PREFETCH and not prefetch:
            raise ValueError("fused step: path gemv-prefetch needs prefetch=True")
        if path == Path.GEMM and prefetch:
            raise ValueError("fused step: the gemm path has no PREFETCH kernels (prefetch=True)")
        return Choice(path, f"forced: {path}")
    choice = projection_path(batch, n_embd, dtype)
    if choice.path == Path.GEMM or not prefetch:
        return Choice(choice.path, choice.reason + ("; no prefetch on the gemm path" if prefetch else ""))
    ok, why = prefetch_pays(batch, row_tiles or {})
    return Choice(Path.GEMV_PREFETCH if ok else Path.GEMV, f"{choice.reason}; {why}")
