"""Where the fused step's time goes, kernel by kernel: the profiled kernels matched to its launches, their bytes
(lab.step.fused.traffic), achieved bandwidth, share of the step, and a fit of time = fixed latency + bytes / bandwidth.

Pure functions of one profiled step (the kernels' names and GPU times in start order, as
lab.measure.stepprofile.count_kernels returns them in `sequence`), so they are tested on the CPU with a made-up
profile; the profile phase (lab.experiments.common.methods) calls `table` and stores what it returns as the
`fused_kernels.{method}.{shape}` note (lab.contract.notes.FUSED_KERNELS).

Matching: a Triton launch is the next kernel whose name starts with its function's name; a library call (the
gemm path's torch.addmm / torch.mm) takes every kernel up to the next Triton launch's, whatever its form
(lab.step.fused.layout: a plain-GEMM form's bias copy and its GEMM, a split-K GEMM's reduction, all count
as the call's); each library call's row says its form. A profile that does not follow the plan's launches
is not forced into it: the table keeps its bytes and says why it has no times.

The fit: least squares over every call of the layer kernels (the launches of each layer,
traffic.LAYER_KERNELS), µs against bytes: its intercept is the fixed cost of a launch that moves nothing, its
slope one over the bandwidth the bytes stream at. Where the fixed part is most of each kernel's time, halving
the bytes (bf16) cannot halve the step.

Under programmatic dependent launch (`fused-pdl`, `fused-pdl-prefetch`) a kernel starts while its predecessor
drains and waits inside: the profiler's durations overlap, so they are not additive (their sum exceeds the
step) and are no measure of what a kernel costs; such a table is kept, marked not additive, and has no fit:
the plain `fused` variant's table is the attribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from lab.step.fused import traffic as T

PDL_CAVEAT = ("under programmatic dependent launch a kernel starts early and waits for its predecessor, so the "
              "profiler's kernel durations overlap: they are not additive and do not say what a kernel costs "
              "(the plain fused variant's table attributes the step)")


def attribute(sequence: Sequence[tuple[str, float]], step: Sequence[T.Call]) -> list[float] | str:
    """The µs of each of `step`'s calls from the profiled kernels in start order, or why they do not match."""
    out: list[float] = []
    i, n = 0, len(sequence)
    for j, call in enumerate(step):
        fn = call.function
        if fn is not None:
            if i >= n:
                return f"the profile has {n} kernels; the step's launch {j + 1} ({fn}) is not among them"
            name, us = sequence[i]
            if not name.startswith(fn):
                return f"profiled kernel {i + 1} is {name[:60]!r} where the step's launch {j + 1} is {fn}"
            out.append(float(us))
            i += 1
            continue
        following = next((c.function for c in step[j + 1:] if c.function is not None), None)
        start = i
        while i < n and not (following is not None and sequence[i][0].startswith(following)):
            i += 1
        if i == start:
            return f"no profiled kernel for the step's library call {j + 1} ({call.kernel})"
        out.append(float(sum(us for _, us in sequence[start:i])))
    if i < n:
        return (f"the profile has {n - i} kernel(s) after the step's {len(step)} launches "
                f"(the first: {sequence[i][0][:60]!r})")
    return out


@dataclass(frozen=True)
class Fit:
    """time per call = fixed_us + bytes x us_per_byte, least squares over `points` calls."""

    fixed_us: float
    us_per_byte: float
    points: int
    fixed_share: float  # of the fitted calls' summed time: points x fixed_us / their sum

    @property
    def bandwidth_gbps(self) -> float | None:
        """1 / slope, in GB/s; None where time does not grow with bytes."""
        return 1.0 / self.us_per_byte / 1e3 if self.us_per_byte > 0 else None


def fit(points: Sequence[tuple[float, float]]) -> Fit | None:
    """Least squares of µs on bytes over (bytes, µs) points; None for fewer than two distinct byte counts."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    fixed = my - slope * mx
    total = my * n
    return Fit(fixed, slope, n, n * fixed / total if total > 0 else 0.0)


def _rows(step: Sequence[T.Call], us: list[float] | None, step_us: float | None,
          layout: T.Layout) -> list[dict[str, Any]]:
    rows = []
    for k in T.per_kernel(list(step)):
        idx = [i for i, c in enumerate(step) if c.kernel == k.kernel]
        total_us = sum(us[i] for i in idx) if us is not None else None
        per_us = total_us / k.calls if total_us is not None else None
        per_b = k.per_call
        rows.append({"kernel": k.kernel, "function": T.FUNCTIONS.get(k.kernel),
                     "form": layout.form(k.kernel) if k.kernel in T.LIBRARY else None, "calls": k.calls,
                     "us_per_call": None if per_us is None else round(per_us, 3),
                     "us": None if total_us is None else round(total_us, 3),
                     "bytes_per_call": round(per_b), "weight_bytes_per_call": round(k.weights / k.calls),
                     "kv_bytes_per_call": round(k.kv / k.calls),
                     "activation_bytes_per_call": round(k.activations / k.calls),
                     "gbps": round(per_b / per_us / 1e3, 1) if per_us else None,
                     "share": round(total_us / step_us, 4) if total_us is not None and step_us else None})
    return rows


def table(method: str, params: dict[str, Any], shape: T.Shape, layout: T.Layout, position: int,
          sequence: Sequence[tuple[str, float]], step_us: float | None, busy_us: float | None,
          pdl: bool) -> dict[str, Any]:
    """The `fused_kernels` note of one profiled step at `position`: per kernel its calls, µs per call, bytes per
    call (weights, KV cache, activations), achieved GB/s and share of the step (`step_us`: the median timed
    step; None leaves the share out), and the latency fit over the layer kernels (None under PDL)."""
    step = T.calls(shape, layout, position)
    matched = attribute(sequence, step)
    us = matched if isinstance(matched, list) else None
    why = matched if isinstance(matched, str) else (PDL_CAVEAT if pdl else "")
    family = "gemm" if layout.path == "gemm" else "gemv"
    got = None
    if us is not None and not pdl:
        got = fit([(float(c.total), u) for c, u in zip(step, us) if c.kernel in T.LAYER_KERNELS[family]])
        if got is None:
            why = "no fit: the layer kernels' calls do not move two different byte counts"
    fitted = None if got is None else {
        "fixed_us": round(got.fixed_us, 3), "bandwidth_gbps": None if got.bandwidth_gbps is None
        else round(got.bandwidth_gbps, 1), "us_per_mb": round(got.us_per_byte * 1e6, 4), "points": got.points,
        "fixed_share": round(got.fixed_share, 4), "kernels": list(T.LAYER_KERNELS[family])}
    # the cache slots attention reads: all of them (EARLY), else the reached ones (on the gemm path slot
    # `position` comes from the QKV GEMM's output instead)
    slots = shape.max_len if layout.early_attention else position if layout.path == "gemm" else position + 1
    return {"method": method, "params": dict(params), "path": layout.path, "position": position, "kv_slots": slots,
            "pdl": pdl, "additive": not pdl and us is not None,
            "step_us": None if step_us is None else round(step_us, 3),
            "kernel_us": None if us is None else round(sum(us), 3),
            "busy_us": None if busy_us is None else round(busy_us, 3),
            "bytes": sum(c.total for c in step), "kernels": _rows(step, us, step_us, layout), "fit": fitted, "why": why}


def plan_of(state: Any) -> Any:
    """The fused plan bound to `state` (lab.step.fused.step's plans, made when the method was built), or None."""
    from lab.step.fused import step

    return step.plan_bound_to(state)
