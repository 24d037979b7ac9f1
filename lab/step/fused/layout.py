"""How the gemm path calls the library for each projection: the call forms, the declared default, the measured choice.

The fused step's gemm path (lab.step.fused.library) runs four products a layer and one a step through the
library: qkv, proj, fc, fc2 (each with a bias) and lm_head (none). torch reaches cuBLAS by two routes
(aten/src/ATen/native/cuda/Blas.cpp, `addmm_out_cuda_impl` and `isInputCompliesAddmmCudaLt`):

- cuBLASLt's `gemm_and_bias`, the bias added in the GEMM's epilogue (one launch): torch.addmm with a
  1-D contiguous bias, beta 1, a contiguous 2-D result and every matrix dimension above 1. `out=` or
  not reaches the same route (it only skips the allocation), and `F.linear` on a 2-D input is this
  call without `out=` (it allocates its result, so it is no candidate of its own).
- the plain cuBLAS GEMM (cublasSgemm / cublasGemmEx) otherwise: `torch.mm` (beta 0), or a 2-D bias,
  which torch first copies into the result and then accumulates with beta 1 (two launches). With a
  batch of 1 (a forced gemm path) the Lt conditions fail and every form takes this route.

And cuBLAS picks its kernel per operand layout: the weight as stored, W [out, in] (`W.t()` is
column-major: op TN), or a contiguous copy Wt [in, out] (op NN). On an H200 the step's default calls
landed on `cutlass_80_simt_sgemm_64x64_8x5_tn` (45 us a call for 9.4 MB at B=16) and `sgemm_largek`
while torch.compile's calls of the same products landed on other kernels, so the form is measured,
not assumed. The forms (`Form`): {Lt epilogue, plain GEMM} x {W, Wt}. Every form computes the same
products in the weights' dtype with the same math mode (TF32 stays as the lab sets it: an fp32
method using TF32 would be another method); only the order of the sums inside a GEMM differs.

Not a candidate: the plain GEMM into `out` with the bias added by the following fused row kernel
(attention, add_ln, gelu would each need a bias operand: a change to those kernels, left out).

The choice (library.choose_forms): on CUDA, each projection's forms are run once (one that raises,
or whose output disagrees with the first form's beyond `AGREE_REL`, is recorded and skipped), then
timed in rotating rounds over every layer's weights (a round: `CALLS` runs of all n_layer calls, so
the weights stream from memory as in the step, not from L2), the median over rounds kept; the
fastest wins, the default kept where it is within `TIE` of the fastest. Elsewhere (the CPU, the
Triton interpreter) nothing is timed: `DEFAULT`, today's calls. `pick` and `measure` are pure (a
timer is passed in); the record of a choice is the `fused_layouts` note (lab.contract.notes).
No torch here: the traffic model (lab.step.fused.traffic) reads the forms' byte rules from it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Mapping

TIE = 0.01  # a form within 1% of the fastest median is a tie: the default, else the first declared, wins
AGREE_REL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-2}  # of the first form's largest |output|
ROUNDS, CALLS = 5, 3  # timed rounds per projection (rotating over its forms); bursts of n_layer calls per round


class Form(StrEnum):
    LT_T = "lt-t"  # torch.addmm(bias, a, W.t(), out=): cuBLASLt, bias in the epilogue, op TN
    LT_N = "lt-n"  # torch.addmm(bias, a, Wt, out=), Wt = W.t().contiguous() [in, out]: cuBLASLt, op NN
    BLAS_T = "blas-t"  # the bias rows copied into out, cuBLAS GEMM with beta 1 (no bias: torch.mm), op TN
    BLAS_N = "blas-n"  # the same with Wt: op NN

    @property
    def transposed(self) -> bool:
        """The form reads the contiguous copy Wt [in, out] instead of W [out, in]."""
        return self in (Form.LT_N, Form.BLAS_N)

    @property
    def epilogue(self) -> bool:
        """The bias goes through cuBLASLt's epilogue (a zero bias where the product has none)."""
        return self in (Form.LT_T, Form.LT_N)


@dataclass(frozen=True)
class Projection:
    """One library product of the gemm path: its launch name, operand buffers, weight and bias."""

    name: str
    launch: str  # the LibraryCall's name (lab.step.fused.traffic.LIBRARY)
    source: str  # the input buffer (lab.step.fused.library.buffers, or "logits" for the output)
    target: str
    weight: str  # a LayerWeights attribute, or "wte" (the tied lm_head)
    bias: str | None  # a LayerWeights attribute; None for lm_head


PROJECTIONS: tuple[Projection, ...] = (
    Projection("qkv", "qkv_gemm", "xn", "qkv", "attn_w", "attn_b"),
    Projection("proj", "proj_gemm", "att", "y", "proj_w", "proj_b"),
    Projection("fc", "fc_gemm", "xn", "h", "fc_w", "fc_b"),
    Projection("fc2", "fc2_gemm", "h", "y", "fc2_w", "fc2_b"),
    Projection("lm_head", "lm_head_gemm", "xn", "logits", "wte", None),
)
BY_LAUNCH = {p.launch: p for p in PROJECTIONS}
# today's calls (the eager step's F.linear; lm_head's torch.mm): the CPU's forms and every choice's first candidate
DEFAULT: dict[str, Form] = {p.name: Form.BLAS_T if p.bias is None else Form.LT_T for p in PROJECTIONS}


def candidates(p: Projection) -> tuple[Form, ...]:
    """The forms tried for `p`, its default first, then the others in declared order."""
    return (DEFAULT[p.name],) + tuple(f for f in Form if f != DEFAULT[p.name])


def copies_bias(form: Form | str, has_bias: bool) -> bool:
    """The form copies the bias rows into the output before a beta-1 GEMM reads them back (traffic: B x N more
    written and read)."""
    return has_bias and not Form(form).epilogue


def zero_bias(form: Form | str, has_bias: bool) -> bool:
    """The form reads a zero bias of N elements in the epilogue (lm_head through cuBLASLt)."""
    return not has_bias and Form(form).epilogue


@dataclass(frozen=True)
class Trial:
    """One form of one projection: its per-round medians (us a call) or why it was not timed."""

    form: str
    rounds_us: tuple[float, ...] = ()
    error: str = ""

    @property
    def median_us(self) -> float | None:
        return statistics.median(self.rounds_us) if self.rounds_us and not self.error else None


@dataclass(frozen=True)
class Pick:
    """The form chosen for one projection, the default, whether it was timed, why, and every candidate's trial."""

    projection: str
    default: str
    chosen: str
    timed: bool
    reason: str
    trials: tuple[Trial, ...] = ()
    shape: tuple[int, int, int] = (0, 0, 0)  # (batch, in, out) of the product

    def as_note(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "default": self.default, "chosen": self.chosen, "timed": self.timed,
                "reason": self.reason,
                "candidates": {t.form: {"median_us": None if t.median_us is None else round(t.median_us, 3),
                                        "rounds_us": [round(x, 3) for x in t.rounds_us], "error": t.error}
                               for t in self.trials}}


class NoForm(RuntimeError):
    """No form of a projection ran: the gemm path cannot be built here."""


def declared(p: Projection, why: str, shape: tuple[int, int, int] = (0, 0, 0)) -> Pick:
    """The untimed choice: the default form, with the reason nothing was timed."""
    return Pick(p.name, str(DEFAULT[p.name]), str(DEFAULT[p.name]), False, why, (), shape)


def pick(projection: str, default: str, trials: tuple[Trial, ...], tie: float = TIE,
         shape: tuple[int, int, int] = (0, 0, 0)) -> Pick:
    """The fastest timed trial; among those within `tie` of it, the default if it is one, else the first in
    `trials`' order. Raises NoForm when no trial was timed."""
    timed = [t for t in trials if t.median_us is not None]
    if not timed:
        errors = "; ".join(f"{t.form}: {t.error or 'not timed'}" for t in trials)
        raise NoForm(f"fused gemm path: no form of {projection} ran ({errors})")
    best = min(timed, key=lambda t: t.median_us or 0.0)
    fastest = best.median_us or 0.0
    near = [t for t in timed if (t.median_us or 0.0) <= fastest * (1 + tie)]
    chosen = next((t for t in near if t.form == default), near[0])
    skipped = [t.form for t in trials if t.median_us is None]
    if chosen.form == best.form:
        reason = f"{chosen.form} fastest: {fastest:.2f} us a call"
    else:
        reason = (f"{chosen.form} at {chosen.median_us:.2f} us is within {tie:.0%} of the fastest, {best.form} at "
                  f"{fastest:.2f} us: {'the default' if chosen.form == default else 'the first declared'} kept")
    if chosen.form != default:
        base = next((t for t in timed if t.form == default), None)
        reason += "" if base is None else f" (default {default}: {base.median_us:.2f} us)"
    if skipped:
        reason += f"; not timed: {', '.join(skipped)}"
    return Pick(projection, default, chosen.form, True, reason, trials, shape)


# A timer: the bursts to time, by form -> each form's per-round medians, us a burst (lab.step.fused.library.cuda_timer)
Timer = Callable[[Mapping[str, Callable[[], None]]], Mapping[str, list[float]]]


@dataclass
class Candidate:
    """One form bound for the measurement: `burst` runs it once per layer; `output` snapshots what it wrote."""

    form: str
    burst: Callable[[], None]
    output: Callable[[], Any] = field(default=lambda: None)


def measure(projection: str, default: str, forms: list[Candidate], per_burst: int, timer: Timer,
            agree: Callable[[Any, Any], str | None] | None = None, shape: tuple[int, int, int] = (0, 0, 0)) -> Pick:
    """Run each form's burst once (one that raises, or whose output `agree` finds different from the first form's, is
    recorded with why and not timed), time the others with `timer`, and `pick` by us a call (a burst makes
    `per_burst` calls: one per layer)."""
    errors: dict[str, str] = {}
    reference: tuple[str, Any] | None = None
    for c in forms:
        try:
            c.burst()
            got = c.output()
        except Exception as exc:  # a form the library refuses here: recorded, skipped
            errors[c.form] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            continue
        if reference is None:
            reference = (c.form, got)
            continue
        why = agree(reference[1], got) if agree is not None else None
        if why is not None:
            errors[c.form] = f"output differs from {reference[0]}'s: {why}"
    runs = {c.form: c.burst for c in forms if c.form not in errors}
    rounds = timer(runs) if runs else {}
    trials = tuple(Trial(c.form, tuple(us / per_burst for us in rounds.get(c.form, ())), errors.get(c.form, ""))
                   for c in forms)
    return pick(projection, default, trials, shape=shape)


@dataclass(frozen=True)
class Choice:
    """Every projection's pick, whether they were timed, why, and the bytes of the Wt copies the plan keeps."""

    picks: tuple[Pick, ...]
    timed: bool
    why: str
    allow_tf32: bool = False
    extra_bytes: int = 0

    @property
    def forms(self) -> dict[str, Form]:
        return {p.projection: Form(p.chosen) for p in self.picks}

    def as_note(self) -> dict[str, Any]:
        """The `fused_layouts` note's body (lab.contract.notes.FUSED_LAYOUTS; the writer adds method and params)."""
        return {"timed": self.timed, "why": self.why, "allow_tf32": self.allow_tf32, "rounds": ROUNDS,
                "calls_per_round": CALLS, "extra_bytes": self.extra_bytes,
                "projections": {p.projection: p.as_note() for p in self.picks}}
