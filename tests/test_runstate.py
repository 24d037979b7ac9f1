"""A resumed run never mixes measurements: what is measured must match the first start, what may differ is recorded."""

from __future__ import annotations

import dataclasses

import pytest

from lab.contract import profiles
from lab.contract.results import load
from lab.run import manifest, runner
from lab.run.rundir import RunDirError

from cli_helpers import cli, one_compile, one_line_error

SMOKE = profiles.get("smoke")


def _first_start(tmp_path, fake) -> None:
    fake("recompiles", one_compile)
    fake("graph_breaks", one_compile)
    runner.run(SMOKE, tmp_path, only=["recompiles"])


def _nothing_written(tmp_path) -> None:
    assert len(load(tmp_path).run.starts) == 1


def test_resume_refuses_a_changed_model_shape_naming_the_field(tmp_path, fake) -> None:
    _first_start(tmp_path, fake)
    deeper = dataclasses.replace(SMOKE, model=dataclasses.replace(SMOKE.model, n_layer=SMOKE.model.n_layer + 1))
    with pytest.raises(RunDirError, match=r"profile\.model\.n_layer is 3 now but was 2") as info:
        runner.run(deeper, tmp_path, resume=True)
    assert "\n" not in str(info.value) and "--force" in str(info.value)
    _nothing_written(tmp_path)


def test_resume_refuses_changed_decode_steps_or_batches(tmp_path, fake) -> None:
    _first_start(tmp_path, fake)
    with pytest.raises(RunDirError, match=r"profile\.decode_steps"):
        runner.run(dataclasses.replace(SMOKE, decode_steps=SMOKE.decode_steps + 1), tmp_path, resume=True)
    with pytest.raises(RunDirError, match=r"profile\.batches"):
        runner.run(dataclasses.replace(SMOKE, batches=(*SMOKE.batches, 64)), tmp_path, resume=True)
    _nothing_written(tmp_path)


def test_resume_refuses_other_weights_and_names_the_first_starts(tmp_path, fake, tiny) -> None:
    _first_start(tmp_path, fake)  # random weights
    folder = tmp_path.parent / "ckpt"
    tiny[0].save_pretrained(folder)
    with pytest.raises(RunDirError, match=r"weights\.source is 'local' now but was 'random'.*--weights random"):
        runner.run(SMOKE, tmp_path, resume=True, weights=str(folder))
    _nothing_written(tmp_path)


def test_resume_refuses_a_changed_lab_source_unless_allowed(tmp_path, fake, monkeypatch, capsys) -> None:
    _first_start(tmp_path, fake)
    monkeypatch.setattr(manifest, "source_digest", lambda: "f" * 64)
    err = one_line_error(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume")
    assert "the lab's source changed" in err and "--allow-source-change" in err
    _nothing_written(tmp_path)
    assert "--resume" in one_line_error(capsys, "run", "--profile", "smoke", "--out", str(tmp_path),
                                        "--allow-source-change")
    rc, _ = cli(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume", "--allow-source-change")
    assert rc == 0
    starts = load(tmp_path).run.starts
    assert len(starts) == 2 and "lab.source_sha256" in starts[1].manifest_changes


def test_a_run_resumed_with_another_source_says_so_where_it_shows_its_tree(tmp_path, fake, monkeypatch,
                                                                          capsys) -> None:
    """Issue 30: a resumed run with --allow-source-change still said "dirty: no" on its run page."""
    from report.site.provenance import tree_state
    from report.sections.section import environment

    _first_start(tmp_path, fake)
    assert "source changed" not in tree_state(load(tmp_path))
    monkeypatch.setattr(manifest, "source_digest", lambda: "f" * 64)
    assert cli(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume", "--allow-source-change")[0] == 0
    run = load(tmp_path)
    assert tree_state(run).endswith("; source changed at start 2 (--allow-source-change)")
    row = next(r for r in environment(run).tables[0].rows if r[0].text == "Lab tree dirty")
    assert row[1].text.endswith(" at the first start; source changed at start 2 (--allow-source-change)")


def test_resume_refuses_a_new_label(tmp_path, fake, capsys) -> None:
    """Issue 30: `--resume --label NEW` silently kept the first start's label."""
    _first_start(tmp_path, fake)
    err = one_line_error(capsys, "run", "--profile", "smoke", "--out", str(tmp_path), "--resume", "--label", "new")
    assert "--label 'new', but the run started without one" in err
    _nothing_written(tmp_path)


def test_each_start_records_the_hosts_load_and_cores(tmp_path, fake, monkeypatch) -> None:
    loads = iter([[0.5, 0.4, 0.3], [7.0, 6.0, 5.0]])
    monkeypatch.setattr("lab.run.runstate.load_average", lambda: next(loads))
    monkeypatch.setattr("lab.run.runstate.usable_cores", lambda: 2)
    _first_start(tmp_path, fake)
    runner.run(SMOKE, tmp_path, only=["graph_breaks"], resume=True)
    starts = load(tmp_path).run.starts
    assert [s.load_average for s in starts] == [[0.5, 0.4, 0.3], [7.0, 6.0, 5.0]]
    assert [s.usable_cores for s in starts] == [2, 2]


def test_an_overloaded_host_is_warned_about_and_recorded(tmp_path, fake, monkeypatch, capsys) -> None:
    monkeypatch.setattr("lab.run.runstate.load_average", lambda: [9.0, 8.0, 7.0])
    monkeypatch.setattr("lab.run.runstate.usable_cores", lambda: 2)
    monkeypatch.setattr("lab.run.manifest.host_info", lambda: {"hostname": "h", "load_start": [9.0, 8.0, 7.0]})
    monkeypatch.setattr("lab.run.manifest.cpu_info", lambda: {"usable_cores": 2, "logical_cores": 2})
    fake("recompiles", one_compile)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "recompiles", "--out", str(tmp_path))
    assert rc == 0 and "warning: the host's 1-minute load is 9 on 2 usable core(s)" in err
    assert load(tmp_path).manifest["host"]["overloaded"] is True


def test_an_idle_host_is_not_warned_about(tmp_path, fake, monkeypatch, capsys) -> None:
    monkeypatch.setattr("lab.run.runstate.load_average", lambda: [0.5, 0.5, 0.5])
    monkeypatch.setattr("lab.run.runstate.usable_cores", lambda: 2)
    monkeypatch.setattr("lab.run.manifest.host_info", lambda: {"hostname": "h", "load_start": [0.5, 0.5, 0.5]})
    monkeypatch.setattr("lab.run.manifest.cpu_info", lambda: {"usable_cores": 2, "logical_cores": 2})
    fake("recompiles", one_compile)
    rc, err = cli(capsys, "run", "--profile", "smoke", "--only", "recompiles", "--out", str(tmp_path))
    assert rc == 0 and "warning: the host's" not in err
    assert load(tmp_path).manifest["host"]["overloaded"] is False
