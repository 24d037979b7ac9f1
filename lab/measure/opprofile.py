"""One step under torch.profiler, reduced to what the overhead experiments need.

"Kernels" means different things per device, and the lab says which:
- CUDA: device activities (kernels, memcpy, memset) the profiler saw on the GPU; their durations are
  device time, and the host's own time is the self CPU time of every host event.
- CPU: the host is the device. A "kernel" is an outermost operator event (an `aten::` op not nested
  in another one, which is what the dispatcher ran for Python) or a kernel Inductor generated
  (`cpp_fused_*`, recorded because `enable_cpp_kernel_profile` turns Inductor's kernel profiling on).
  Its time is the event's inclusive CPU time.

Matrix products are told apart by name (aten op names on the CPU, cuBLAS/CUTLASS/Triton template
names on the GPU): they are what fusion cannot improve, so `matmul_share` is the Amdahl fraction
compile cannot touch.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

MATMUL_ATEN = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot", "einsum",
                         "_scaled_mm", "addbmm", "convolution", "_convolution", "conv2d", "conv1d"})
# cuBLAS (gemm/gemv, sm90 xmma, Hopper "nvjet"), CUTLASS, split-K reductions, Triton mm templates.
MATMUL_KERNEL = re.compile(r"gemm|gemv|nvjet|xmma|cutlass|cublas|splitkreduce|triton_tem|(^|_)b?mm(_|$)|addmm|"
                           r"mkldnn|onednn|matmul")
# Events of the profiler/compiler machinery, not operators run for the user.
_WRAPPER_PREFIXES = ("TorchDynamo", "Torch-Compiled Region", "Pregraph", "AOTDispatcher", "## ", "CompiledFunction",
                     "cuda", "cuLaunch", "cudaGraph", "ProfilerStep", "Optimizer", "[memory]")


def is_matmul(name: str) -> bool:
    """Whether an operator or kernel name is a matrix product (what fusion leaves alone)."""
    if name.startswith("aten::"):
        return name.split("::", 1)[1] in MATMUL_ATEN
    return MATMUL_KERNEL.search(name.lower()) is not None


_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::")  # aten::add, mkldnn::_linear_pointwise, ...


def _is_op(name: str) -> bool:
    return _OP.match(name) is not None or "cpp_fused" in name or name.startswith("cpp_")  # Inductor's C++ kernels


@dataclass
class StepProfile:
    """Per-step figures from profiling `steps` calls (all times in milliseconds per step)."""

    device: str  # "cuda" or "cpu"
    steps: int
    kernels: float  # per step: device activities (CUDA) or outermost op events + generated kernels (CPU)
    self_cpu_ms: float  # per step: self CPU time summed over every host event
    self_device_ms: float | None  # per step: device activity time (None on the CPU)
    kernel_ms: float  # per step: time inside the counted kernels
    matmul_ms: float  # per step: of kernel_ms, in matrix products
    by_name: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (ms per step, count per step)

    @property
    def matmul_share(self) -> float:
        return self.matmul_ms / self.kernel_ms if self.kernel_ms > 0 else 0.0

    @property
    def fusible_fraction(self) -> float:
        """Share of kernel time outside matrix products: the part fusion can attack."""
        return 1.0 - self.matmul_share if self.kernel_ms > 0 else 0.0

    def top(self, n: int = 8) -> list[dict[str, Any]]:
        rows = sorted(self.by_name.items(), key=lambda kv: -kv[1][0])[:n]
        return [{"name": k[:90], "ms_per_step": round(v[0], 4), "per_step": round(v[1], 2), "matmul": is_matmul(k)}
                for k, v in rows]


@contextlib.contextmanager
def enable_cpp_kernel_profile() -> Iterator[None]:
    """Make Inductor's generated C++ kernels show up as profiler events (set while compiling)."""
    import torch._inductor.config as cfg

    saved = cfg.cpp.enable_kernel_profile
    cfg.cpp.enable_kernel_profile = True
    try:
        yield
    finally:
        cfg.cpp.enable_kernel_profile = saved


def _outermost(evt: Any) -> bool:
    parent = evt.cpu_parent
    while parent is not None:
        if _is_op(parent.name):
            return False
        parent = parent.cpu_parent
    return True


def summarise(events: list[Any], steps: int, device: str) -> StepProfile:
    """Reduce profiler events (of `steps` calls) to a StepProfile. Pure: tests feed fake events."""
    from torch.autograd import DeviceType

    on_cuda = device == "cuda"
    self_cpu_us = device_us = kernel_us = matmul_us = 0.0
    kernels = 0
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in events:
        if e.device_type == DeviceType.CPU:
            self_cpu_us += float(e.self_cpu_time_total)
        if on_cuda:
            if e.device_type != DeviceType.CUDA:
                continue
            us = float(e.time_range.elapsed_us())
            device_us += us
        else:
            if (e.device_type != DeviceType.CPU or e.name.startswith(_WRAPPER_PREFIXES) or not _is_op(e.name)
                    or not _outermost(e)):
                continue
            us = float(e.cpu_time_total)
        kernels += 1
        kernel_us += us
        if is_matmul(e.name):
            matmul_us += us
        by_name[e.name][0] += us
        by_name[e.name][1] += 1
    n = max(steps, 1)
    return StepProfile(
        device="cuda" if on_cuda else "cpu", steps=steps, kernels=kernels / n, self_cpu_ms=self_cpu_us / n / 1e3,
        self_device_ms=device_us / n / 1e3 if on_cuda else None, kernel_ms=kernel_us / n / 1e3,
        matmul_ms=matmul_us / n / 1e3,
        by_name={k: (v[0] / n / 1e3, v[1] / n) for k, v in by_name.items()},
    )


def profile_step(fn: Callable[[], Any], device: str | torch.device, steps: int = 5, warmup: int = 2) -> StepProfile:
    """Profile `steps` calls of `fn` (after `warmup` unprofiled ones), synchronised at both ends."""
    from lab.measure import profiler_guard

    dev = torch.device(device).type
    for _ in range(warmup):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    with profiler_guard.session(f"profile_step {getattr(fn, '__name__', 'fn')}", cuda=dev == "cuda") as prof:
        for _ in range(steps):
            fn()
        if dev == "cuda":
            torch.cuda.synchronize()
    return summarise(list(prof.events()), steps, dev)
