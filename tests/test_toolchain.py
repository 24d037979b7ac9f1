"""The toolchain probe: each NOT_RUN reason, from a host view with the compiler or headers hidden."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from lab.contract.results import Reason
from lab.host.toolchain import (CudaInfo, CxxInfo, HostView, Toolchain, TritonInfo, probe, probe_cxx, probe_triton,
                           try_compile_python_extension)


def fake_compiler(folder: Path, name: str = "g++", version: str = "g++ (Fake) 99.1", openssl: bool = True,
                  prints: str = "lab-compiler-ok 42") -> Path:
    """A fake compiler (and, beside it, the openssl that Inductor's header precompiling runs).

    It answers --version, and "compiles" by writing to -o a program that prints `prints` (what the
    probe's one-line program prints when a compiler works)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\n"
                   "out=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=\"$2\"; shift; done\n"
                   f"printf '#!/bin/sh\\necho \"{prints}\"\\n' > \"$out\" && chmod +x \"$out\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    if openssl:
        ssl = folder / "openssl"
        ssl.write_text("#!/bin/sh\necho 'OpenSSL (fake)'\n")
        ssl.chmod(ssl.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def headers(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Python.h").write_text("/* fake */\n")
    return folder


def toolchain(view: HostView, triton: TritonInfo | None = None) -> Toolchain:
    return Toolchain(platform="test", cuda=CudaInfo(False, why_not="test"), triton=triton or TritonInfo(True, "3.6"),
                     cxx=probe_cxx(view), os_family=view.platform)


def test_no_compiler_anywhere(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "root"),
                         python_include=str(headers(tmp_path / "inc")))
    tc = toolchain(view)
    reason = tc.cxx_reason()
    assert reason is not None and reason.code == "no_cxx_compiler"
    assert "apt-get install g++" in reason.message and "g++" in reason.message
    assert tc.reason_for("inductor", "cpu") == reason
    assert tc.reason_for("cxx", "cuda") == reason


def test_installed_but_not_on_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    exe = fake_compiler(root / "usr" / "bin")
    (tmp_path / "bin").mkdir()
    view = HostView.make(path=str(tmp_path / "bin"), root=str(root), python_include=str(headers(tmp_path / "inc")))
    tc = toolchain(view)
    assert tc.cxx.compiler is None
    assert tc.cxx.off_path == [str(exe)]
    reason = tc.cxx_reason()
    assert reason is not None and reason.code == "compiler_not_on_path"
    assert f"CXX={exe}" in reason.message and str(exe.parent) in reason.message


def test_found_on_path_with_headers(tmp_path: Path) -> None:
    exe = fake_compiler(tmp_path / "bin")
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "root"),
                         python_include=str(headers(tmp_path / "inc")))
    tc = toolchain(view)
    assert (tc.cxx.compiler, tc.cxx.path, tc.cxx.version) == ("g++", str(exe), "g++ (Fake) 99.1")
    assert tc.cxx.off_path == []
    assert tc.cxx_reason() is None and tc.reason_for("inductor", "cpu") is None


def test_missing_python_headers(tmp_path: Path) -> None:
    fake_compiler(tmp_path / "bin")
    (tmp_path / "inc").mkdir()
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "root"), python_include=str(tmp_path / "inc"))
    reason = toolchain(view).cxx_reason()
    assert reason is not None and reason.code == "no_python_headers"
    assert "python3-dev" in reason.message and str(tmp_path / "inc") in reason.message


def test_cxx_variable_overrides_the_search(tmp_path: Path) -> None:
    fake_compiler(tmp_path / "bin")  # g++ is on PATH, but CXX names something else
    inc = str(headers(tmp_path / "inc"))
    missing = HostView.make(path=str(tmp_path / "bin"), environ={"CXX": "/nowhere/c++"}, root=str(tmp_path / "r"),
                            python_include=inc)
    reason = toolchain(missing).cxx_reason()
    assert reason is not None and reason.code == "cxx_not_found" and "CXX=/nowhere/c++" in reason.message
    assert "none is installed" not in reason.message and str(tmp_path / "bin" / "g++") in reason.message
    clang = fake_compiler(tmp_path / "opt", "clang++", "clang version 99")
    chosen = HostView.make(path=str(tmp_path / "bin"), environ={"CXX": str(clang)}, python_include=inc)
    tc = toolchain(chosen)
    assert tc.cxx.path == str(clang) and tc.cxx.version == "clang version 99" and tc.cxx_reason() is None


def test_a_compiler_that_does_not_run_is_not_a_compiler(tmp_path: Path) -> None:
    exe = fake_compiler(tmp_path / "bin")
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "r"),
                         python_include=str(headers(tmp_path / "inc")), run=lambda cmd: None)
    tc = toolchain(view)
    assert tc.cxx.compiler is None and tc.cxx.unusable == [str(exe)]
    reason = tc.cxx_reason()
    assert reason.code == "compiler_broken" and str(exe) in reason.message and "--version" in reason.message


def test_windows_reason_names_the_msvc_loader() -> None:
    cxx = CxxInfo(inductor_setting="('cl',)", compiler=None, path=None, version=None,
                  off_path=[r"C:\VS\VC\Tools\MSVC\14.38\bin\Hostx64\x64\cl.exe"], python_h="Python.h")
    tc = Toolchain("Windows-11", CudaInfo(False), TritonInfo(True), cxx, os_family="win32")
    reason = tc.cxx_reason()
    assert reason.code == "compiler_not_on_path" and "load_msvc_environment" in reason.message
    tc.cxx.off_path = []
    assert "Build Tools" in tc.cxx_reason().message


def test_no_triton_reasons() -> None:
    def broken() -> None:
        raise ImportError("libcuda.so.1: cannot open shared object file")

    info = probe_triton(broken)
    assert not info.importable and "libcuda.so.1" in info.why_not
    tc = Toolchain("t", CudaInfo(True), info, CxxInfo("", "g++", "/usr/bin/g++", "x", python_h="P"))
    reason = tc.triton_reason()
    assert isinstance(reason, Reason) and reason.code == "no_triton" and "libcuda.so.1" in reason.message
    assert tc.reason_for("inductor", "cuda") == reason and tc.reason_for("inductor", "cpu") is None
    assert probe_triton(lambda: type("M", (), {"__version__": "3.6.0"})).version == "3.6.0"
    with pytest.raises(ValueError, match="unknown requirement"):
        tc.reason_for("fortran", "cpu")


def test_real_probe_agrees_with_inductor() -> None:
    tc = probe()
    assert tc.cxx.search, "Inductor's search list read from the installed torch"
    if tc.cxx.compiler is not None:
        assert tc.cxx.inductor_agrees is True


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_python_h_compile_probe(tmp_path: Path) -> None:
    real = probe_cxx(HostView.current())
    assert try_compile_python_extension(real) == (True, "")
    (tmp_path / "inc").mkdir()
    hidden = CxxInfo("", real.compiler, real.path, real.version, python_include=str(tmp_path / "inc"))
    ok, err = try_compile_python_extension(hidden)
    assert ok is False and "Python.h" in err
    assert try_compile_python_extension(CxxInfo("", None, None, None))[0] is None


def test_missing_openssl_is_its_own_reason(tmp_path: Path) -> None:
    """torch 2.13's Inductor runs `openssl sha512` on precompiled headers: without it, NOT_RUN, not a crash."""
    from dataclasses import replace

    fake_compiler(tmp_path / "bin", openssl=False)
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "root"),
                         python_include=str(headers(tmp_path / "inc")))
    tc = toolchain(view)
    tc.cxx = replace(tc.cxx, precompile_headers=True)
    reason = tc.reason_for("inductor", "cpu")
    assert reason is not None and reason.code == "no_openssl" and "apt-get install openssl" in reason.message
    tc.cxx = replace(tc.cxx, precompile_headers=False)
    assert tc.reason_for("inductor", "cpu") is None


# ---------------------------------------------------------------------------- a compiler must build and run a program

def test_cxx_bin_false_is_a_broken_compiler_named_by_its_variable(tmp_path: Path) -> None:
    """`/bin/false --version` prints a version (exit 1): the old probe accepted it and Inductor then failed for 13 s
    blaming the step's ops. Now the probe builds and runs a one-line program with it: NOT_RUN compiler_broken."""
    inc = str(headers(tmp_path / "inc"))
    view = HostView.make(path="/usr/bin:/bin", environ={"CXX": "/bin/false"}, root="/", python_include=inc)
    tc = toolchain(view)
    assert tc.cxx.path == "/bin/false" and tc.cxx.broken is not None
    reason = tc.reason_for("inductor", "cpu")
    assert reason.code == "compiler_broken"
    assert "CXX=/bin/false" in reason.message and "cannot compile a one-line program" in reason.message


def test_a_compiler_whose_program_misbehaves_is_broken(tmp_path: Path) -> None:
    fake_compiler(tmp_path / "bin", prints="something else")
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "r"),
                         python_include=str(headers(tmp_path / "inc")))
    reason = toolchain(view).cxx_reason()
    assert reason.code == "compiler_broken" and "did not run correctly" in reason.message
    assert "set CXX to a working compiler" in reason.message


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
@pytest.mark.slow
def test_cxx_pointing_nowhere_names_the_compiler_that_exists() -> None:
    """CXX=/nonexistent/g++ while g++ is on PATH: not 'none is installed', but unset CXX to use that g++.
    (A fresh process: Inductor reads $CXX when torch is imported.)"""
    import os
    import subprocess
    import sys

    from lab.run.manifest import REPO_ROOT

    code = "from lab.host.toolchain import probe; r = probe().reason_for('inductor', 'cpu'); print(r.code); print(r.message)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                         env={**os.environ, "CXX": "/nonexistent/g++"})
    assert out.returncode == 0, out.stderr[-2000:]
    got, message = out.stdout.strip().splitlines()
    assert got == "cxx_not_found" and "CXX=/nonexistent/g++" in message
    assert "none is installed" not in message and shutil.which("g++") in message


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_the_real_compiler_builds_and_runs_the_probe_program() -> None:
    from lab.host.cxxcheck import compile_and_run

    assert compile_and_run(shutil.which("g++"), "c++") is None
    assert probe().cxx.broken is None


def test_cc_that_cannot_build_is_triton_s_reason(tmp_path: Path) -> None:
    """Triton builds its launcher with $CC: a CC that cannot build and run a C program is compiler_broken, naming CC."""
    view = HostView.make(path="/usr/bin:/bin", environ={"CC": "/bin/false"}, root=str(tmp_path / "r"),
                         python_include=str(headers(tmp_path / "inc")))
    tc = probe(view)
    tc.triton.importable = True
    reason = tc.reason_for("inductor", "cuda")
    assert reason.code == "compiler_broken" and "CC=/bin/false" in reason.message
    assert tc.reason_for("inductor", "cpu") is None or tc.reason_for("inductor", "cpu").code != "compiler_broken" \
        or "CC=" not in tc.reason_for("inductor", "cpu").message


# ---------------------------------------------------------------------------- Inductor's cache directory

def test_a_cache_directory_that_cannot_be_created_is_found_by_the_probe(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    cache = tmp_path / "a-file" / "inductor"
    tc = probe(HostView.make(path=str(tmp_path), environ={"TORCHINDUCTOR_CACHE_DIR": str(cache)}))
    assert tc.inductor_cache_dir == str(cache) and "is a file, not a directory" in tc.inductor_cache_problem
    reason = tc.reason_for("inductor", "cpu")
    assert reason is not None and reason.code == "inductor_cache_unwritable"
    assert str(cache) in reason.message and "TORCHINDUCTOR_CACHE_DIR" in reason.message
    assert tc.reason_for("inductor", "cuda") == reason  # before Triton's or the compiler's reasons


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (nobody may create files there)")
def test_a_read_only_cache_directory_is_found_by_the_probe(tmp_path: Path) -> None:
    tc = probe(HostView.make(path=str(tmp_path), environ={"TORCHINDUCTOR_CACHE_DIR": "/proc/self/inductor"}))
    assert "read-only" in tc.inductor_cache_problem
    writable = probe(HostView.make(path=str(tmp_path), environ={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")}))
    assert writable.inductor_cache_problem is None and writable.cache_reason() is None


def test_compiling_experiments_are_not_run_for_an_unwritable_cache(tmp_path: Path, monkeypatch) -> None:
    from lab.contract import profiles
    from lab.run import runner

    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "a-file" / "inductor"))
    res = runner.run(profiles.get("smoke"), tmp_path / "run", only=["toolchain", "gemm_bound"])
    gemm = res.record("gemm_bound")
    assert gemm.status == "NOT_RUN" and gemm.reason.code == "inductor_cache_unwritable"
    usable = {m.params["backend"]: m.value for m in res.record("toolchain").metrics
              if m.name == "inductor_backend_usable"}
    assert usable == {"cpp": False, "triton": False}
