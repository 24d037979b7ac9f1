"""lab/host/wheelhouse.py and `python -m lab wheelhouse`: the lab's dependencies as hashed wheels for an offline host.

The quick tests resolve against a folder of tiny wheels made here (pip with no index and no configuration),
for CPython 3.12 on manylinux_2_28_x86_64 whatever this host is. The slow one is the whole route on this
host's own platform: the real wheelhouse, a fresh virtualenv with torch, the wheels installed with
`--no-index`, and the lab run from it through nox.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_helpers import cli

from lab.host import wheelhouse as W

ROOT = Path(__file__).resolve().parents[1]
TARGET = W.Target("3.12", "manylinux_2_28_x86_64")


def make_wheel(index: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = ()) -> Path:
    """A minimal wheel: METADATA (with its Requires-Dist), WHEEL, RECORD and one module."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = index / f"{dist}-{tag}.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name.replace('-', '_')}.py": "", f"{dist}.dist-info/METADATA": metadata,
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for file, text in files.items():
            z.writestr(file, text)
    return path


@pytest.fixture
def index(tmp_path: Path, monkeypatch) -> Path:
    """A local index of tiny wheels; pip reads nothing else (no configuration files, no index)."""
    folder = tmp_path / "index"
    folder.mkdir()
    make_wheel(folder, "alpha", "1.0", requires=("beta>=2",))
    make_wheel(folder, "beta", "2.0", tag="cp312-cp312-manylinux_2_17_x86_64")  # older manylinux than the target's
    make_wheel(folder, "gamma", "1.0", tag="cp312-cp312-manylinux_2_34_x86_64")  # newer: no wheel for the target
    make_wheel(folder, "torch", "9.0")
    make_wheel(folder, "needs-torch", "1.0", requires=("torch",))
    make_wheel(folder, "nvidia-cublas-cu12", "1.0")
    make_wheel(folder, "needs-cuda", "1.0", requires=("nvidia-cublas-cu12",))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return folder


def test_the_lab_requirements_are_pyprojects_and_nox_without_torch_triton_or_cuda() -> None:
    wanted = W.lab_requirements(ROOT / "pyproject.toml")
    names = {W.normalize(W.requirement_name(spec)) for spec in wanted}
    assert {"pydantic", "jinja2", "matplotlib", "rich", "transformers", "nox"} <= names
    assert not any(W.left_to_host(n) for n in names)
    assert "pydantic>=2.7,<3" in wanted and any(spec.startswith("nox>=") for spec in wanted)


def test_left_to_host_covers_torch_triton_and_every_cuda_library() -> None:
    for name in ("torch", "Triton", "pytorch_triton", "nvidia-cublas-cu12", "nvidia_cudnn_cu13", "NVIDIA.nccl-cu12"):
        assert W.left_to_host(name), name
    for name in ("pydantic", "torchvision-like", "nvidiafake", "transformers"):
        assert not W.left_to_host(name), name


def test_a_manylinux_target_lists_every_older_manylinux_tag_pip_must_be_given() -> None:
    tags = W.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags and not any("aarch64" in t for t in tags)
    assert W.platform_tags("manylinux2014_aarch64")[:2] == ("manylinux_2_17_aarch64", "manylinux2014_aarch64")
    assert W.platform_tags("win_amd64") == ("win_amd64",)
    args = TARGET.pip_args()
    assert args[:5] == ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.12"]
    assert args.count("--platform") == len(W.platform_tags("manylinux_2_28_x86_64"))


@pytest.mark.parametrize("python, platform", [("312", "manylinux_2_28_x86_64"), ("3.12", "many linux")])
def test_a_bad_target_is_refused_naming_the_option(python: str, platform: str) -> None:
    with pytest.raises(ValueError, match="--python" if python == "312" else "--platform"):
        W.Target(python, platform)


def test_the_wheels_are_downloaded_with_a_hash_line_each_that_pip_accepts(index: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    wheels = W.build(out, ["alpha"], TARGET)
    assert [(w.name, w.version) for w in wheels] == [("alpha", "1.0"), ("beta", "2.0")]
    assert sorted(p.name for p in out.iterdir()) == ["alpha-1.0-py3-none-any.whl",
                                                     "beta-2.0-cp312-cp312-manylinux_2_17_x86_64.whl",
                                                     "requirements.txt"]
    lines = [line for line in (out / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    expected = [f"{w.name}=={w.version} --hash=sha256:{hashlib.sha256((out / w.file).read_bytes()).hexdigest()}"
                for w in wheels]
    assert lines == expected
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(out),
                           "--require-hashes", "-r", str(out / "requirements.txt"), "--ignore-installed",
                           *TARGET.pip_args()], capture_output=True, text=True, check=False,
                          env={**os.environ, "PIP_FIND_LINKS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Would install alpha-1.0 beta-2.0" in proc.stdout


def test_a_dependency_on_torch_is_refused_and_torch_never_downloaded(index: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    with pytest.raises(ValueError) as info:
        W.build(out, ["alpha", "needs-torch"], TARGET)
    assert "needs-torch 1.0 depends on torch" in str(info.value)
    assert "\n" not in str(info.value)
    assert list(out.iterdir()) == []


def test_a_dependency_on_a_cuda_library_is_refused_before_anything_is_downloaded(index: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    with pytest.raises(ValueError, match="pull nvidia-cublas-cu12, which the wheelhouse leaves to the GPU host"):
        W.build(out, ["alpha", "needs-cuda"], TARGET)
    assert list(out.iterdir()) == []


def test_no_wheel_for_the_target_is_one_line_naming_the_package_and_exit_2(index: Path, tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:
    monkeypatch.setattr(W, "lab_requirements", lambda _pyproject: ["alpha", "gamma"])
    rc, err = cli(capsys, "wheelhouse", str(tmp_path / "wheelhouse"), "--python", "3.12",
                  "--platform", "manylinux_2_28_x86_64")
    started, err = err.splitlines()  # the line saying what it resolves, then the error
    assert rc == 2 and started.startswith("resolving 2 requirements") and err.startswith("error: "), (rc, err)
    assert "pip found no wheel of gamma for CPython 3.12 on manylinux_2_28_x86_64" in err
    assert not list((tmp_path / "wheelhouse").glob("*.whl"))


# Run in an interpreter that refuses the lab's third-party dependencies: the command needs only the standard library.
WITHOUT_DEPENDENCIES = """
import sys
from pathlib import Path
refused = {"torch", "pydantic", "jinja2", "matplotlib", "rich", "transformers", "numpy", "nox"}
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in refused:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
from lab.__main__ import build_parser
build_parser().parse_args(["wheelhouse", sys.argv[1]])
from lab.host import wheelhouse as W
print(len(W.build(Path(sys.argv[1]), ["alpha"], W.Target("3.12", "manylinux_2_28_x86_64"))))
"""


def test_the_command_runs_with_a_python3_that_has_none_of_the_labs_dependencies(index: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", WITHOUT_DEPENDENCIES, str(tmp_path / "wheelhouse")], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "2", proc.stdout + proc.stderr[-3000:]
    assert (tmp_path / "wheelhouse" / "requirements.txt").is_file()


# ---------------------------------------------------------------------------- --have: what the GPU host has

FREEZE = """# pip freeze of the GPU host
torch==2.9.0+cu128
Epsilon==1.0
typing_extensions===4.12.2
mylib @ file:///opt/src/mylib
-e git+https://example.invalid/x.git@abc#egg=checkout
"""


def test_have_reads_pip_freeze_output(tmp_path: Path) -> None:
    path = tmp_path / "host.txt"
    path.write_text(FREEZE)
    assert W.read_have(path) == {"torch": "2.9.0+cu128", "epsilon": "1.0", "typing-extensions": "4.12.2",
                                 "mylib": None, "checkout": None}


@pytest.mark.parametrize("text, said", [
    ("epsilon==1.0\nnot a requirement line\n", "line 2 is not `name==version`"),
    ("# nothing\n\n", "lists no package"),
    (None, "cannot read it"),
])
def test_a_bad_have_file_is_one_line_and_exit_2_before_pip_runs(tmp_path: Path, capsys, monkeypatch, text,
                                                                 said: str) -> None:
    from cli_helpers import one_line_error

    path = tmp_path / "host.txt"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(W, "build", lambda *a, **k: pytest.fail("pip ran"))
    err = one_line_error(capsys, "wheelhouse", str(tmp_path / "wh"), "--python", "3.12", "--platform",
                         "manylinux_2_28_x86_64", "--have", str(path))
    assert f"--have {path}: {said}" in err


@pytest.fixture
def pure(index: Path) -> Path:
    """Pure wheels beside the index's: delta needs epsilon>=1 (1.0 and 2.0 exist); lam needs iota>=1 and kappa>=1,
    iota 2.0 needs kappa>=2 but iota 1.0 kappa<2."""
    make_wheel(index, "delta", "1.0", requires=("epsilon>=1",))
    for version in ("1.0", "2.0"):
        make_wheel(index, "epsilon", version)
        make_wheel(index, "kappa", version)
    make_wheel(index, "lam", "1.0", requires=("iota>=1", "kappa>=1"))
    make_wheel(index, "iota", "1.0", requires=("kappa<2",))
    make_wheel(index, "iota", "2.0", requires=("kappa>=2",))
    return index


def _requirements(out: Path) -> tuple[list[str], list[str]]:
    lines = (out / "requirements.txt").read_text().splitlines()
    return [x for x in lines if x.startswith("#")], [x.split(" --hash")[0] for x in lines if not x.startswith("#")]


def test_what_the_host_has_at_an_accepted_version_is_left_out_and_the_documented_install_works(
        pure: Path, tmp_path: Path) -> None:
    have = tmp_path / "host.txt"
    have.write_text("epsilon==1.0\n")
    out = tmp_path / "wheelhouse"
    wheels = W.build(out, ["delta"], TARGET, have=W.read_have(have), have_file=have)
    assert [w.file for w in wheels] == ["delta-1.0-py3-none-any.whl"] and not (out / "epsilon-2.0-py3-none-any.whl").exists()
    comments, pins = _requirements(out)
    assert pins == ["delta==1.0"]
    assert "#   left out: epsilon==1.0 is on the host, a version the lab's dependencies accept" in comments

    # the GPU host: epsilon 1.0 installed; the README's install command, offline, adds delta and keeps epsilon 1.0
    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", "-q", "epsilon==1.0"], check=True, timeout=300, capture_output=True)
    env = {**os.environ, "PIP_FIND_LINKS": ""}
    proc = subprocess.run([*pip, *W.install_command(out).split()[3:]], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True, check=True).stdout
    assert "delta==1.0" in listed and "epsilon==1.0" in listed


def test_a_host_version_the_lab_does_not_accept_is_carried_saying_why(pure: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    wheels = W.build(out, ["delta"], TARGET, have={"epsilon": "0.5", "mylib": None}, have_file=Path("host.txt"))
    assert [(w.name, w.version) for w in wheels] == [("delta", "1.0"), ("epsilon", "2.0")]
    comments, _ = _requirements(out)
    assert "#   carried: epsilon: the host has 0.5; delta 1.0 asks for epsilon>=1" in comments
    assert not any("left out" in c for c in comments)


def test_host_versions_that_do_not_resolve_together_leave_nothing_out_and_say_so(pure: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    # iota 1.0 and kappa 2.0 each meet what the newest resolution asks, but iota 1.0 needs kappa<2
    wheels = W.build(out, ["lam"], TARGET, have={"iota": "1.0", "kappa": "2.0"}, have_file=Path("host.txt"))
    assert [(w.name, w.version) for w in wheels] == [("iota", "2.0"), ("kappa", "2.0"), ("lam", "1.0")]
    comments, _ = _requirements(out)
    assert any(c.startswith("#   nothing left out: pip could not resolve the lab's dependencies with the host's")
               for c in comments)
