"""When a step method counts as correct: exact tokens for eager's own kernels, teacher forcing for the rest.

Free-running greedy decoding with random weights meets many near-ties between the two largest logits;
a method whose arithmetic differs (bf16, or fp32 summed in another order by a compiler or a fused
kernel) picks the other token at the first one and the sequences part for good. So free-running
agreement measures divergence after near-ties, not error: it is recorded as data, never a failed
check. What decides is `judge`:

- fp32, a method that runs eager's own kernels (eager, graph replay of eager): its greedy tokens must
  equal eager's exactly. The same kernels on the same inputs give the same bits; any difference is a
  bug (a stale graph input, a wrong position), so this check is fatal.
- every other case (bf16, compiled, hand-fused): the teacher-forced rule. Fed fp32 eager's token at
  every step, the method's argmax agrees with fp32 eager's at least as often as the *baseline* does,
  less a tolerance (`tolerance`: `AGREEMENT_TOLERANCE`, or two near-tie flips where the steps judged are
  few), and its largest logit error is at most `LOGIT_ERROR_FACTOR` times the
  baseline's. The baseline is bf16 eager in bf16 (the lab's own rounding at that precision: a
  method that reorders bf16 arithmetic should be as close to fp32 as bf16 eager is), and in fp32
  the fixed `FP32_BASELINE` (fp32 eager against itself is exact, so the allowance is declared).
  In fp32 a method whose free-running tokens equal eager's passes without teacher forcing (equal
  sequences are the stronger evidence); the rule is run where they differ.

The numbers: `AGREEMENT_TOLERANCE = 0.02` is about two near-tie flips in 128 steps at batch 1 (each
flipped step costs 1/128 = 0.8%); bf16 reorderings seen on an H200 agreed 81-88% against bf16 eager's
81%, so a real error (a wrong bias, a stale cache row) drops far below. `LOGIT_ERROR_FACTOR = 2`
allows a reordering twice bf16 eager's own rounding error (summation order changes the error of a
bf16 dot product by about that much) and still catches a real error, which is of the logits' own
size. `FP32_BASELINE`: fp32 reorderings on the 124M step differed by at most 1.7e-4 in the logits and
flipped no argmax; 1e-3 of the largest |logit| and 98% agreement leave room for larger models.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.contract.names import Method

AGREEMENT_TOLERANCE = 0.02
LOGIT_ERROR_FACTOR = 2.0
FP32_REL_LOGIT_ERROR = 1e-3  # fp32: largest logit error allowed, as a fraction of the reference's largest |logit|
EAGER_KERNEL_METHODS: frozenset[str] = frozenset({Method.EAGER, Method.GRAPH})


@dataclass(frozen=True)
class Baseline:
    """What a method is judged against: the agreement and logit error the lab accepts as rounding."""

    agreement: float
    max_logit_error: float
    source: str  # "bf16 eager" or "fp32 allowance"


@dataclass(frozen=True)
class Verdict:
    correct: bool
    rule: str  # "exact tokens" or "teacher-forced"
    detail: str


def exact_rule(method: str, dtype: str) -> bool:
    """Whether the method is judged by exact token equality (fp32 and eager's own kernels)."""
    return dtype == "float32" and method in EAGER_KERNEL_METHODS


def fp32_baseline(reference_max_abs_logit: float) -> Baseline:
    return Baseline(1.0, FP32_REL_LOGIT_ERROR * reference_max_abs_logit, "fp32 allowance")


def tolerance(rows: int) -> float:
    """The agreement a method may lose to the baseline: AGREEMENT_TOLERANCE, or two near-tie flips among `rows`
    judged (steps x batch rows) where two flips are more than that (32 steps at batch 1: 6%)."""
    return max(AGREEMENT_TOLERANCE, 2 / max(1, rows))


def teacher_forced(agreement: float, max_logit_error: float, baseline: Baseline, rows: int = 0) -> Verdict:
    """The teacher-forced rule against a baseline (`rows`: the steps x batch rows the agreement is over)."""
    tol = tolerance(rows)
    min_agree = baseline.agreement - tol
    max_err = LOGIT_ERROR_FACTOR * baseline.max_logit_error if baseline.source == "bf16 eager" \
        else baseline.max_logit_error
    ok = agreement >= min_agree and max_logit_error <= max_err
    return Verdict(ok, "teacher-forced",
                   f"teacher-forced agreement {agreement:.4f} (at least {min_agree:.4f}: {baseline.source} "
                   f"{baseline.agreement:.4f} less {tol:.3g}), largest logit error {max_logit_error:.3g} "
                   f"(at most {max_err:.3g})")


def exact(agreement: float) -> Verdict:
    return Verdict(agreement == 1.0, "exact tokens", f"free-running token agreement {agreement:.4f} (must be 1)")
