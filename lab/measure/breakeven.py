"""The arithmetic of whether a one-off cost (compile, capture) pays for itself."""

from __future__ import annotations

import math


def break_even_calls(setup_s: float, baseline_ms: float, fast_ms: float) -> int | None:
    """Calls after which `setup_s` seconds of setup are repaid by saving baseline-fast per call.

    None when the fast path saves nothing (it never pays). A setup of zero pays at once (0 calls).
    """
    if setup_s < 0 or baseline_ms < 0 or fast_ms < 0:
        raise ValueError("times must be non-negative")
    saving_ms = baseline_ms - fast_ms
    if saving_ms <= 0:
        return None
    return math.ceil(setup_s * 1e3 / saving_ms)
