"""toolchain: which C++ compiler Inductor would use and where it was found, Python headers, Triton, MSVC.

Every Inductor experiment's NOT_RUN reason comes from the same probe (lab.host.toolchain), so this
record says, for the host, what would make each of them run. With `try_compile` it also compiles
a one-line file that includes Python.h with the compiler found, which is what fails in a
container that has g++ but no python3-dev ("Python.h: No such file or directory").
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.options import option
from lab.contract.reasons import Code
from lab.host.cxxcheck import try_compile_python_extension
from lab.run.context import Context


@dataclass(frozen=True)
class Options:
    try_compile: bool = option(False, "also compile a one-line file that includes Python.h with the compiler found")


def run(ctx: Context[Options]) -> None:
    tc = ctx.toolchain
    ctx.note(N.TOOLCHAIN.key, tc.as_dict())
    ctx.note(N.COMPILER.key, {"name": tc.cxx.compiler, "path": tc.cxx.path, "version": tc.cxx.version,
                          "search": tc.cxx.search, "CXX": tc.cxx.cxx_env, "inductor_agrees": tc.cxx.inductor_agrees})
    ctx.metrics({M.CXX_COMPILER_FOUND: tc.cxx.compiler is not None, M.CXX_OFF_PATH: len(tc.cxx.off_path),
                 M.PYTHON_HEADERS: tc.cxx.python_h is not None, M.TRITON_IMPORTABLE: tc.triton.importable,
                 M.CUDA_AVAILABLE: tc.cuda.available})
    if tc.cxx.msvc is not None:
        ctx.note(N.MSVC.key, tc.cxx.msvc)
    if tc.cxx.inductor_agrees is not None:
        ctx.check("the probe and Inductor's own get_cpp_compiler() agree", tc.cxx.inductor_agrees,
                  detail=f"probe: {tc.cxx.compiler}", fatal=False)
    # every compile writes Inductor's cache: a cache directory it cannot write stops both backends
    for backend, reason in (("cpp", tc.cache_reason() or tc.cxx_reason()),
                            ("triton", tc.cache_reason() or tc.triton_reason())):
        ctx.metric(M.INDUCTOR_BACKEND_USABLE, reason is None, backend=backend)
        if reason is not None:
            ctx.note(N.BACKEND_REASON.key_for(backend), {"code": reason.code, "message": reason.message})
    if ctx.options.try_compile:
        if (why := tc.cxx_reason()) is not None:
            ctx.skip("python_extension_compile", why.code, why.message)
        else:
            ok, err = try_compile_python_extension(tc.cxx)
            if ok is None:
                ctx.skip("python_extension_compile", Code.NOT_APPLICABLE, err)
            else:
                ctx.metric(M.PYTHON_EXTENSION_COMPILES, ok)
                ctx.check("a file including Python.h compiles", ok, detail=err, fatal=False)
