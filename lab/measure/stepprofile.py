"""Where one step's device time goes: its kernels, their GPU time, the union of their intervals.

`count_kernels(fn, device)` profiles one call of a step (torch.profiler) and returns the kernels per
step, their summed GPU time, the GPU-busy time (the union of the kernels' intervals: kernels that
overlap, as under programmatic dependent launch, count once), the span from the first kernel's
start to the last one's end, and the kernels that took the most time. On the CPU the host is the
device: outermost operators plus Inductor's generated kernels (lab.measure.opprofile's definition).
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: time at least one kernel ran (overlaps count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def count_kernels(fn: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """Device kernels (CUDA) or operator calls (CPU) of one call of `fn`, from torch.profiler.

    On CUDA also `busy_us`, the union of the kernels' intervals on the device (what the GPU was busy
    with during the call: kernels that overlap, as programmatic dependent launch lets them, count once)
    and `span_us`, first kernel start to last kernel end, and `sequence`, every kernel's (name, GPU µs) in
    start order (lab.step.fused.breakdown matches it to the fused step's launches); None on the CPU.

    The call runs under `torch.no_grad()`, as the steps are built and timed: Dynamo guards grad mode,
    so a compiled step called with grad enabled would recompile here (one more cache entry towards the
    recompile limit, seconds of compiling) and the profile would be of that other compilation."""
    from lab.measure import profiler_guard

    label = f"count_kernels {getattr(fn, '__name__', 'step')}"
    with profiler_guard.session(label, cuda=device.type == "cuda") as prof, torch.no_grad():
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
                   and "memset" not in e.name.lower()]
        times = [float(e.device_time if hasattr(e, "device_time") else e.cuda_time) for e in kernels]
        spans = [(float(e.time_range.start), float(e.time_range.end)) for e in kernels]
        return {"kernels": len(kernels), "device_us": sum(times),
                "busy_us": busy_us(spans) if spans else None,
                "span_us": (max(b for _, b in spans) - min(a for a, _ in spans)) if spans else None,
                "top": top_kernels([(e.name, t) for e, t in zip(kernels, times)]),
                "sequence": sequence([(e.name, s[0], t) for e, s, t in zip(kernels, spans, times)])}
    # On the CPU the host is the device: outermost operators plus the kernels Inductor generated
    # (lab.measure.opprofile's definition, shared with the overhead experiments).
    from lab.measure.opprofile import summarise

    prof_cpu = summarise(list(events), 1, "cpu")
    return {"kernels": int(prof_cpu.kernels), "device_us": None, "busy_us": None, "span_us": None, "sequence": None,
            "top": [{"name": r["name"], "count": int(r["per_step"]), "us": round(r["ms_per_step"] * 1e3, 2)}
                    for r in prof_cpu.top()]}


def top_kernels(named_us: list[tuple[str, float]], n: int = 8) -> list[dict[str, Any]]:
    """The kernels (or ops) that took the most time, grouped by name: where a step's time goes."""
    agg: dict[str, list[float]] = {}
    for name, us in named_us:
        entry = agg.setdefault(name[:100], [0, 0.0])
        entry[0] += 1
        entry[1] += us
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"name": k, "count": int(v[0]), "us": round(v[1], 2)} for k, v in ranked]


def sequence(named: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """(name, µs) of each kernel in start order, from (name, start, µs): launch order, also where kernels overlap."""
    return [(name, round(us, 3)) for name, _, us in sorted(named, key=lambda k: k[1])]
