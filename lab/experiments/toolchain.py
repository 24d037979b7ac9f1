"""toolchain: which C++ compiler Inductor would use and where it was found, Python headers, Triton, MSVC.

Every Inductor experiment's NOT_RUN reason comes from the same probe (lab.toolchain), so this
record says, for the host, what would make each of them run. With `try_compile` it also compiles
a one-line file that includes Python.h with the compiler found, which is what fails in a
container that has g++ but no python3-dev ("Python.h: No such file or directory").
"""

from __future__ import annotations

from lab.toolchain import try_compile_python_extension


def run(ctx) -> None:
    tc = ctx.toolchain
    ctx.note("toolchain", tc.as_dict())
    ctx.note("compiler", {"name": tc.cxx.compiler, "path": tc.cxx.path, "version": tc.cxx.version,
                          "search": tc.cxx.search, "CXX": tc.cxx.cxx_env, "inductor_agrees": tc.cxx.inductor_agrees})
    ctx.metric("cxx_compiler_found", tc.cxx.compiler is not None, "bool")
    ctx.metric("cxx_off_path", len(tc.cxx.off_path), "count")
    ctx.metric("python_headers", tc.cxx.python_h is not None, "bool")
    ctx.metric("triton_importable", tc.triton.importable, "bool")
    ctx.metric("cuda_available", tc.cuda.available, "bool")
    if tc.cxx.msvc is not None:
        ctx.note("msvc", tc.cxx.msvc)
    if tc.cxx.inductor_agrees is not None:
        ctx.check("the probe and Inductor's own get_cpp_compiler() agree", tc.cxx.inductor_agrees,
                  detail=f"probe: {tc.cxx.compiler}", fatal=False)
    for backend, reason in (("cpp", tc.cxx_reason()), ("triton", tc.triton_reason())):
        ctx.metric("inductor_backend_usable", reason is None, "bool", backend=backend)
        if reason is not None:
            ctx.note(f"reason.{backend}", {"code": reason.code, "message": reason.message})
    if ctx.opt("try_compile", False):
        if tc.cxx_reason() is not None:
            ctx.skip("python_extension_compile", tc.cxx_reason().code, tc.cxx_reason().message)
        else:
            ok, err = try_compile_python_extension(tc.cxx)
            if ok is None:
                ctx.skip("python_extension_compile", "not_applicable", err)
            else:
                ctx.metric("python_extension_compiles", ok, "bool")
                ctx.check("a file including Python.h compiles", ok, detail=err, fatal=False)
