"""Three targets for `python -m lab diagnose`, one per verdict a user is likely to meet.

Each function returns `(callable, example_inputs)`; it takes `device` so the same target runs on
the CPU and on a GPU.

- `elementwise_chain`: forty elementwise ops on one row of 256 floats (batch 1). Eager pays dispatch (and on
  a GPU a launch) per op and writes every intermediate; compiled, it is one fused kernel. Speeds up.
- `gemm_stack`: a large-batch stack of big matrix products with a light activation between them.
  The time is in library GEMMs: compile gives about 1.0×, and that is the correct answer.
- `breaks_every_call`: RMS-normalisation that pulls a scalar to Python with `.item()`, branches on
  it and prints it: a graph break on every call, whatever the compiler does with the rest.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def _chain(x: torch.Tensor) -> torch.Tensor:
    for i in range(10):  # 4 elementwise ops per iteration: 40 ops
        x = torch.sigmoid(x * 1.01 + 0.1 * i) - 0.25
    return x


def elementwise_chain(device: str = "cpu") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Forty elementwise ops on one row of 256 floats (batch 1): overhead-bound in eager."""
    g = torch.Generator().manual_seed(0)
    return _chain, (torch.randn(1, 256, generator=g).to(device),)


class _GemmStack(torch.nn.Module):
    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def gemm_stack(device: str = "cpu") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Three Linear(D, D) + ReLU at a large batch: D=512, batch 256 on the CPU; D=4096, batch 8192 on CUDA."""
    dim, batch = (4096, 8192) if torch.device(device).type == "cuda" else (512, 256)
    torch.manual_seed(0)
    model = _GemmStack(dim, 3).to(device).eval()
    return model, (torch.randn(batch, dim, device=device),)


def _rms_step_with_breaks(h: torch.Tensor) -> torch.Tensor:
    h = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + 1e-6)
    peak = h.abs().max().item()  # a host scalar: Dynamo stops the graph here
    if peak > 3.0:  # a Python branch on a tensor value
        h = h / peak
    print(f"peak {peak:.3f}")  # host I/O in the hot path
    return h * 0.5 + 0.1


def breaks_every_call(device: str = "cpu") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """RMS-normalisation with `.item()`, a Python `if` and `print` on a [4, 64] tensor."""
    g = torch.Generator().manual_seed(0)
    return _rms_step_with_breaks, (torch.randn(4, 64, generator=g).to(device),)
