"""toolchain: which C++ compiler Inductor would use and where it was found, Python headers, Triton.

Every Inductor experiment's NOT_RUN reason comes from the same probe (lab.toolchain), so this
record says, for the host, what would make each of them run.
"""

from __future__ import annotations


def run(ctx) -> None:
    tc = ctx.toolchain
    ctx.note("toolchain", tc.as_dict())
    ctx.metric("cxx_compiler_found", tc.cxx.compiler is not None, "bool")
    ctx.metric("cxx_off_path", len(tc.cxx.off_path), "count")
    ctx.metric("python_headers", tc.cxx.python_h is not None, "bool")
    ctx.metric("triton_importable", tc.triton.importable, "bool")
    ctx.metric("cuda_available", tc.cuda.available, "bool")
    for backend, reason in (("cpp", tc.cxx_reason()), ("triton", tc.triton_reason())):
        ctx.metric("inductor_backend_usable", reason is None, "bool", backend=backend)
        if reason is not None:
            ctx.note(f"reason.{backend}", {"code": reason.code, "message": reason.message})
