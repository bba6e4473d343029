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
    assert (args.build, args.profile_dir, args.scale, args.bear, args.bear_templates) == (
        False, ".kcal-findings", 1.0, None, None,
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
