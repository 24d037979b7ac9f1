"""One bound launch of the fused step: a Triton kernel with its grid, or a call of the library (torch.addmm).

What a captured graph holds as one node (or, for a library call, the kernels the library launches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Launch:
    """One Triton kernel launch with its arguments bound."""

    name: str
    kernel: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    meta: dict[str, Any]

    def __call__(self) -> None:
        self.kernel[self.grid](*self.args, **self.meta)


@dataclass(frozen=True)
class LibraryCall:
    """One call of a library operation into a preallocated output (`out=`): no allocation, capturable."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    form: str = ""  # how it calls the library (lab.step.fused.layout.Form); "" where no form applies

    def __call__(self) -> None:
        self.fn(*self.args, **self.kwargs)
