"""load_msvc_environment on Linux, with recorded vswhere and `set` output through an injected runner."""

from __future__ import annotations

import json

from lab.host import msvc
from lab.host.msvc import MARKER, Completed, load_msvc_environment, parse_set_output

PF86 = r"C:\Program Files (x86)"
VSWHERE = PF86 + r"\Microsoft Visual Studio\Installer\vswhere.exe"
BT = r"C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools"
COMMUNITY19 = r"C:\Program Files (x86)\Microsoft Visual Studio\2019\Community"
MSVC_BIN = BT + r"\VC\Tools\MSVC\14.38.33130\bin\Hostx64\x64"

RECORDED_SET = "\r\n".join([
    "**********************************************************************",
    "** Visual Studio 2022 Developer Command Prompt v17.8.3",
    "[vcvarsall.bat] Environment initialized for: 'x64'",
    MARKER,
    "=C:=C:\\Users\\lab",
    "ALLUSERSPROFILE=C:\\ProgramData",
    f"INCLUDE={BT}\\VC\\Tools\\MSVC\\14.38.33130\\include;C:\\Program Files (x86)\\Windows Kits\\10\\include\\ucrt",
    "LIB=C:\\lib",
    f"Path={MSVC_BIN};C:\\Windows\\system32",
    "VSCMD_ARG_TGT_ARCH=x64",
    "WEIRD=a=b==c",
    "EMPTY=",
    "",
])


class Recorder:
    """Answers vswhere and cmd with recorded output and remembers the commands."""

    def __init__(self, installs: list[dict[str, str]], set_output: str = RECORDED_SET, cmd_rc: int = 0) -> None:
        self.installs, self.set_output, self.cmd_rc = installs, set_output, cmd_rc
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str]) -> Completed:
        self.calls.append(cmd)
        if cmd[0] == VSWHERE:
            return Completed(0, json.dumps(self.installs))
        if cmd[0] == "cmd":
            return Completed(self.cmd_rc, self.set_output if self.cmd_rc == 0 else "",
                             "" if self.cmd_rc == 0 else "ERROR: Cannot determine the location of the VS Common Tools folder.")
        raise AssertionError(f"unexpected command {cmd}")


def exists_for(*paths: str):
    return lambda p: p in paths


def install(path: str, version: str, name: str = "VS") -> dict[str, str]:
    return {"installationPath": path, "installationVersion": version, "displayName": name}


def vcvars(path: str) -> str:
    return path + r"\VC\Auxiliary\Build\vcvars64.bat"


def test_not_applicable_off_windows() -> None:
    env: dict[str, str] = {}
    res = load_msvc_environment(runner=Recorder([]), environ=env, platform="linux")
    assert not res.applicable and not res.loaded and "not Windows" in res.reason and env == {}


def test_no_visual_studio() -> None:
    runner = Recorder([])
    res = load_msvc_environment(runner=runner, exists=exists_for(), environ={"ProgramFiles(x86)": PF86},
                                platform="win32")
    assert res.applicable and not res.loaded and "vswhere.exe not found" in res.reason and runner.calls == []


def test_visual_studio_without_cpp_tools() -> None:
    res = load_msvc_environment(runner=Recorder([]), exists=exists_for(VSWHERE), environ={"ProgramFiles(x86)": PF86},
                                platform="win32")
    assert not res.loaded and "Desktop development with C++" in res.reason


def test_loads_newest_install_and_imports_set_output() -> None:
    runner = Recorder([install(COMMUNITY19, "16.11.34931.43"), install(BT, "17.8.34330.188")])
    env = {"ProgramFiles(x86)": PF86, "LIB": "C:\\lib", "Path": "C:\\Windows\\system32"}
    res = load_msvc_environment(runner=runner, exists=exists_for(VSWHERE, vcvars(COMMUNITY19), vcvars(BT)),
                                environ=env, platform="win32")
    assert res.loaded and res.reason is None
    assert res.chosen == BT and res.vcvars == vcvars(BT)
    assert len(res.installs) == 2
    cmd = runner.calls[-1]
    assert cmd[0] == "cmd" and vcvars(BT) in cmd[-1] and "&& set" in cmd[-1]
    assert env["WEIRD"] == "a=b==c"  # split at the first '=' only
    assert env["EMPTY"] == ""
    assert env["Path"].startswith(MSVC_BIN)
    assert "=C:" not in env and not any(k.startswith("*") or k.startswith("[") for k in env)
    assert "LIB" not in res.changed  # unchanged values are not counted as changes
    assert {"INCLUDE", "Path", "WEIRD", "VSCMD_ARG_TGT_ARCH"} <= set(res.changed)


def test_skips_an_install_without_vcvars() -> None:
    runner = Recorder([install(BT, "17.8.1"), install(COMMUNITY19, "16.11.2")])
    res = load_msvc_environment(runner=runner, exists=exists_for(VSWHERE, vcvars(COMMUNITY19)),
                                environ={"ProgramFiles(x86)": PF86}, platform="win32")
    assert res.loaded and res.chosen == COMMUNITY19
    none = load_msvc_environment(runner=runner, exists=exists_for(VSWHERE), environ={"ProgramFiles(x86)": PF86},
                                 platform="win32")
    assert not none.loaded and "no vcvars64.bat" in none.reason


def test_vcvars_failure_is_reported_not_imported() -> None:
    env = {"ProgramFiles(x86)": PF86}
    res = load_msvc_environment(runner=Recorder([install(BT, "17.8")], cmd_rc=1),
                                exists=exists_for(VSWHERE, vcvars(BT)), environ=env, platform="win32")
    assert not res.loaded and "exit status 1" in res.reason and "VS Common Tools" in res.reason
    assert env == {"ProgramFiles(x86)": PF86}


def test_garbage_vswhere_output_means_no_installs() -> None:
    assert msvc.parse_vswhere("not json") == [] and msvc.parse_vswhere('{"a": 1}') == []


def test_set_output_without_marker_and_describe() -> None:
    assert parse_set_output("A=1\nB=x=y\nnot a variable\n=D:=D:\\") == {"A": "1", "B": "x=y"}
    load_msvc_environment(runner=Recorder([]), environ={}, platform="linux")
    assert msvc.describe()["applicable"] is False
