"""Whether a compiler works: compile a tiny program with it, run the program, read what it prints.

`<compiler> --version` succeeding proves little (`CXX=/bin/false` prints a version and exits 1; a
compiler missing its standard library or linker prints one too): Inductor would then spend many
seconds before its build fails with an error that blames the step's ops. So the toolchain probe
(lab.host.toolchain) builds and runs a one-line program with the compiler it found; one that cannot is
NOT_RUN `compiler_broken`, with the compiler's own first error line, and the message names the
variable (CXX, CC) that pointed at it. The result is cached per compiler file (path, size, mtime).
Standard library only.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import Any

from lab.locks import owned_tempdir
from lab.contract.reasons import Code, Reason

EXPECT = "lab-compiler-ok 42"
SOURCES = {
    "c++": ("probe.cpp", '#include <cstdio>\nint main() { std::printf("lab-compiler-ok %d\\n", 6 * 7); return 0; }\n'),
    "c": ("probe.c", '#include <stdio.h>\nint main(void) { printf("lab-compiler-ok %d\\n", 6 * 7); return 0; }\n'),
}
TIMEOUT_S = 120.0


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:300]
    return lines[0][:300] if lines else "it printed nothing"


def compile_and_run(compiler: str, lang: str = "c++") -> str | None:
    """None when `compiler` builds a one-line `lang` program that runs and prints what it should; else what went
    wrong, as one phrase ("cannot compile a one-line program: ld: cannot find -lstdc++")."""
    try:
        st = os.stat(compiler)
        key: tuple[Any, ...] = (os.path.realpath(compiler), st.st_size, st.st_mtime_ns, lang)
    except OSError as exc:
        return f"cannot be run ({exc.strerror})"
    return _compile_and_run(key, compiler, lang)


@functools.lru_cache(maxsize=32)
def _compile_and_run(key: tuple[Any, ...], compiler: str, lang: str) -> str | None:
    name, text = SOURCES[lang]
    with owned_tempdir("cc") as tmp:
        src, exe = tmp / name, tmp / "probe"
        src.write_text(text)
        try:
            built = subprocess.run([compiler, str(src), "-o", str(exe)], capture_output=True, text=True,
                                   timeout=TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            return f"took more than {TIMEOUT_S:.0f} s to compile a one-line program"
        except OSError as exc:
            return f"cannot be run ({exc.strerror or type(exc).__name__})"
        if built.returncode != 0:
            return (f"cannot compile a one-line program (exit status {built.returncode}): "
                    f"{_first_error(built.stderr or built.stdout)}")
        if not exe.is_file():
            return "reported success compiling a one-line program but wrote no executable"
        try:
            ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"built a one-line program that cannot be run ({type(exc).__name__}: {exc})"
        if ran.returncode != 0 or ran.stdout.strip() != EXPECT:
            return (f"built a one-line program that did not run correctly (exit status {ran.returncode}, printed "
                    f"{ran.stdout.strip()[:60]!r} instead of {EXPECT!r})")
    return None


def others(search_path: str, off_path: list[str], exclude: str | None) -> list[str]:
    """Other C++ compilers here (on `search_path`, then off it), for the sentence that says what to use instead."""
    found = [shutil.which(n, path=search_path) for n in ("g++", "clang++", "c++")] + list(off_path)
    return [f for f in dict.fromkeys(found)
            if f and f != exclude and os.path.realpath(f) != os.path.realpath(exclude or "")]


def broken_reason(compiler: str, where: str, broken: str, variable: str | None, value: str | None,
                  alternatives: list[str]) -> Reason:
    """NOT_RUN compiler_broken: the compiler was found but cannot build and run a tiny program."""
    instead = f" (e.g. {variable or 'CXX'}={alternatives[0]})" if alternatives else ""
    if variable and value:
        what = f"{variable}={value} points at {where}, which"
        fix = f"point {variable} at a working compiler{instead} or unset it"
    else:
        what = f"the C++ compiler Inductor would use, {compiler} ({where}),"
        fix = f"repair or reinstall it, or set CXX to a working compiler{instead}"
    return Reason(Code.COMPILER_BROKEN, f"{what} {broken}: {fix}")


def not_found_reason(variable: str, value: str, alternatives: list[str], version_failed: bool) -> Reason:
    """NOT_RUN cxx_not_found / compiler_broken: the variable names a compiler that does not exist, or does not run."""
    instead = (f"unset {variable} to use {alternatives[0]}, or point {variable} at it" if alternatives
               else f"install a compiler and point {variable} at its full path")
    if version_failed:
        return Reason(Code.COMPILER_BROKEN, f"{variable}={value} exists but `{value} --version` fails: it is not a "
                                            f"working compiler; Inductor uses only ${variable} when it is set: "
                                            f"{instead}")
    return Reason(Code.CXX_NOT_FOUND, f"{variable}={value} names no compiler (no such file, or not on PATH); "
                                      f"Inductor uses only ${variable} when it is set: {instead}")


def cxx_reason(cxx: Any) -> Reason | None:
    """The reasons about the compiler a variable or the search chose (lab.host.toolchain.CxxInfo), POSIX hosts."""
    if cxx.compiler is None and cxx.cxx_env:
        return not_found_reason("CXX", cxx.cxx_env, cxx.others, version_failed=bool(cxx.unusable))
    if cxx.compiler is not None and cxx.broken:
        return broken_reason(cxx.compiler, cxx.path or cxx.compiler, cxx.broken, "CXX" if cxx.cxx_env else None,
                             cxx.cxx_env, cxx.others)
    if cxx.compiler is None and cxx.unusable:
        return broken_reason(os.path.basename(cxx.unusable[0]), cxx.unusable[0], "fails `--version`", None, None,
                             cxx.others)
    return None


def try_compile_python_extension(info: Any, timeout_s: float = 60) -> tuple[bool | None, str]:
    """Compile a one-line C++ file that includes Python.h, as Inductor's kernels do: (ok, first error line).

    None when there is no compiler to try or the compiler is MSVC (it takes other flags).
    """
    if info.path is None or info.compiler in ("cl", "cl.exe"):
        return None, "no compiler to try" if info.path is None else "MSVC: not tried"
    with owned_tempdir("cxx") as tmp:
        src = tmp / "probe.cpp"
        src.write_text("#include <Python.h>\nint lab_probe() { return PY_MAJOR_VERSION; }\n")
        cmd = [info.path, "-fsyntax-only", f"-I{info.python_include}", str(src)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if out.returncode == 0:
            return True, ""
        lines = [ln for ln in out.stderr.splitlines() if "error" in ln] or out.stderr.splitlines() or [""]
        return False, lines[0].strip()[:300]
