"""The toolchain probe: each NOT_RUN reason, from a host view with the compiler or headers hidden."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from lab.results import Reason
from lab.toolchain import (CudaInfo, CxxInfo, HostView, Toolchain, TritonInfo, probe, probe_cxx, probe_triton,
                           try_compile_python_extension)


def fake_compiler(folder: Path, name: str = "g++", version: str = "g++ (Fake) 99.1", openssl: bool = True) -> Path:
    """A fake compiler (and, beside it, the openssl that Inductor's header precompiling runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!/bin/sh\necho '{version}'\n")
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
    assert reason is not None and reason.code == "no_cxx_compiler" and "CXX=/nowhere/c++" in reason.message
    clang = fake_compiler(tmp_path / "opt", "clang++", "clang version 99")
    chosen = HostView.make(path=str(tmp_path / "bin"), environ={"CXX": str(clang)}, python_include=inc)
    tc = toolchain(chosen)
    assert tc.cxx.path == str(clang) and tc.cxx.version == "clang version 99" and tc.cxx_reason() is None


def test_a_compiler_that_does_not_run_is_not_a_compiler(tmp_path: Path) -> None:
    fake_compiler(tmp_path / "bin")
    view = HostView.make(path=str(tmp_path / "bin"), root=str(tmp_path / "r"),
                         python_include=str(headers(tmp_path / "inc")), run=lambda cmd: None)
    assert toolchain(view).cxx_reason().code == "no_cxx_compiler"


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
