"""The Inductor compile probe, run inside an image: direct evidence that its C++ toolchain works (or not)."""

from __future__ import annotations

import time
from dataclasses import asdict


def inductor_probe() -> dict[str, object]:
    """Compile one small function with Inductor on the CPU and compare it with eager.

    The smoke profile's Inductor experiments may be NOT_RUN for other reasons; this is the direct
    evidence that the image's C++ toolchain works (or, in cpu-nocc, that it does not).
    """
    import torch  # only when called: the rest of lab.containers stays importable without torch

    from lab.host.toolchain import probe

    start = time.perf_counter()
    reason = probe().cxx_reason()
    out: dict[str, object] = {"torch": torch.__version__, "toolchain_reason": asdict(reason) if reason else None}
    try:
        fn = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="inductor")
        x = torch.linspace(-3, 3, 257)
        out["compiled"] = True
        out["equal"] = bool(torch.allclose(fn(x), torch.sin(x) * 2 + 1))
    except Exception as exc:  # what a user would see: kept verbatim (first line)
        out["compiled"] = False
        text = str(exc).strip()
        out["error"] = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:500]
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out
