"""`kcal findings --build`'s flags: a bad --scale stops at parsing, naming the flag and the value."""

import json
import os

import pytest

from assets.cli import build_parser


@pytest.mark.parametrize(("value", "why"), [("0", "must be a number > 0"), ("-1", "must be a number > 0"),
                                            ("x", "not a number")])  # fmt: skip
def test_a_bad_scale_exits_2_naming_flag_and_value(value, why, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["findings", "--build", f"--scale={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"kcal findings: error: argument --scale: {value!r}: {why}" in err


def test_build_flags_and_their_defaults():
    args = build_parser().parse_args(["findings"])
    assert (args.build, args.profile_dir, args.scale, args.bear, args.bear_templates, args.allow_dirty) == (
        False, None, 1.0, None, None, False,
    )  # fmt: skip
    args = build_parser().parse_args(
        [
            "findings",
            "--build",
            "--scale",
            "0.5",
            "--profile-dir",
            "p",
            "--bear",
            "b",
            "--bear-templates",
            "t",
        ]
    )
    assert (args.build, args.profile_dir, args.scale, args.bear, args.bear_templates) == (
        True,
        "p",
        0.5,
        "b",
        "t",
    )


def test_a_stage_store_gets_its_own_kcal_and_dagster_home_and_the_caller_keeps_theirs(tmp_path, monkeypatch):
    from assets.findings_profile import stage_home

    monkeypatch.setenv("KCAL_HOME", "/somewhere")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with stage_home(tmp_path / "bear"):
        assert os.environ["KCAL_HOME"] == str(tmp_path / "bear")
        assert os.environ["DAGSTER_HOME"] == str(tmp_path / "bear" / "dagster")
    assert os.environ["KCAL_HOME"] == "/somewhere" and "DAGSTER_HOME" not in os.environ


def test_an_up_to_date_rerun_keeps_the_earlier_build_time(tmp_path):
    from assets.findings_profile import _earlier_stages, _same_stage

    entry = {
        "relations": ["bear-P105"],
        "settings": {"max_templates": 1},
        "source": "bear",
        "bear_templates": None,
    }
    built = {**entry, "name": "markers", "started": "t0", "finished": "t1", "seconds": 61.5}
    (tmp_path / "profile.json").write_text(json.dumps({"stages": [built]}))
    earlier = _earlier_stages(tmp_path / "profile.json")
    assert _same_stage(earlier["markers"], entry)
    assert not _same_stage(earlier["markers"], {**entry, "settings": {"max_templates": 2}})  # other settings
    assert not _same_stage({**built, "seconds": None}, entry)  # never finished
    (tmp_path / "profile.json").write_text("{not json")
    assert _earlier_stages(tmp_path / "profile.json") == {} == _earlier_stages(tmp_path / "none.json")


def test_the_profile_lives_under_kcal_home_unless_a_directory_is_given(tmp_path, monkeypatch):
    from assets.cli_findings import profile_root

    monkeypatch.setenv("KCAL_HOME", str(tmp_path / "home"))
    assert profile_root(build_parser().parse_args(["findings"])) == tmp_path / "home" / "findings"
    given = build_parser().parse_args(["--home", str(tmp_path / "h2"), "findings"])
    assert profile_root(given) == tmp_path / "h2" / "findings"
    explicit = build_parser().parse_args(["findings", "--profile-dir", str(tmp_path / "p")])
    assert profile_root(explicit) == tmp_path / "p"


def test_a_checkout_with_changes_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    import assets.cli_findings as cli
    from kcal_pipeline.reporting import findings

    monkeypatch.setattr(findings, "kcal_commit", lambda root=None: "abc123+changes")
    args = build_parser().parse_args(
        ["--home", str(tmp_path / "none"), "findings", "--out", str(tmp_path / "f.md")]
    )
    assert cli.cmd_findings(args) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes (kcal commit abc123+changes)" in err and "--allow-dirty" in err
    assert not (tmp_path / "f.md").exists()
    allowed = build_parser().parse_args(
        ["--home", str(tmp_path / "none"), "findings", "--allow-dirty", "--out", str(tmp_path / "f.md")]
    )
    with pytest.raises(FileNotFoundError, match="no metrics table"):  # past the check: the empty store
        cli.cmd_findings(allowed)


def test_the_profile_records_split_counts_hashes_and_library_versions(tmp_path):
    import polars as pl

    from assets.findings_profile import file_digest, library_versions, split_counts

    for relation, splits in (("bear-P1", ["dev", "test", "test", "test"]), ("bear-P2", ["test"])):
        folder = tmp_path / "probe_instances" / f"relation={relation}"
        folder.mkdir(parents=True)
        ids = [f"{relation}-{i}" for i in range(len(splits))]
        if relation == "bear-P1":
            ids[-1] = f"{ids[1]}#k5d1"  # a sweep copy of the second instance: not another instance
        pl.DataFrame(
            {"instance_id": ids, "relation_id": [relation] * len(splits), "split": splits}
        ).write_parquet(folder / "part.parquet")
    assert split_counts(tmp_path, ["bear-P1", "bear-P2", "bear-P3"]) == {
        "bear-P1": {"dev": 1, "test": 2},
        "bear-P2": {"test": 1},
    }
    assert split_counts(tmp_path, ["nothing"]) == {}
    a = tmp_path / "bear"
    a.mkdir()
    (a / "x.jsonl").write_text("1")
    first = file_digest(a)
    assert first == file_digest(a) and len(first) == 64
    (a / "x.jsonl").write_text("2")
    assert file_digest(a) != first  # a changed byte changes the folder's hash
    assert file_digest(tmp_path / "absent") is None and file_digest(None) is None
    versions = library_versions()
    assert set(versions) >= {"python", "torch", "transformers", "dagster"}
    assert versions["torch"].startswith("2.")


def test_the_profile_lines_name_seed_splits_hashes_and_a_dirty_build(tmp_path):
    from kcal_pipeline.reporting.findings.document import DIRTY_WARNING, profile_lines

    record = {
        "scale": 1.0, "command": ["findings", "--build"], "kcal_commit": "abc+changes",
        "started": "t0", "finished": "t1", "seconds": 60, "bear": "/b", "bear_sha256": "f" * 64,
        "bear_templates": "/t.json", "bear_templates_sha256": "e" * 64,
        "libraries": {"python": "3.11", "torch": "2.13.0"}, "note": "resumed once",
        "stages": [{
            "name": "bear", "purpose": "p", "relations": ["bear-P1"], "settings": {"max_templates": 5},
            "chosen": "the smallest", "seed": 13, "statements": 1200, "seconds": 61,
            "instances": {"bear-P1": {"dev": 3, "test": 12}},
        }],
    }  # fmt: skip
    lines = profile_lines(tmp_path, record)
    assert DIRTY_WARNING in lines[0]
    assert f"- BEAR: `/b`, sha256 {'f' * 64}" in lines
    assert "- Libraries: python 3.11, torch 2.13.0" in lines
    assert "- Note on this build: resumed once" in lines
    (stage,) = [line for line in lines if line.startswith("- Stage `bear`")]
    assert "1 relations, chosen as the smallest (bear-P1)" in stage
    assert "probe seed 13; 3 dev and 12 test instances; 1,200 statements; built in 1 min 01 s" in stage
