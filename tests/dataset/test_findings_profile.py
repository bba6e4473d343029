"""The findings profile's stages: which relations, how many instances, and how they grow with --scale."""

import json
import math
from pathlib import Path

import pytest

from kcal_pipeline.core.options import OptionsError
from kcal_pipeline.dataset.findings_profile import (
    DEFAULT_BEAR,
    DEFAULT_KISSLING,
    Stage,
    bear_sizes,
    check_scale,
    profile_stages,
    select_bear_relations,
)

# (answer-space size, instances) of a made-up BEAR
SIZES = {"P9": (10, 40), "P10": (5, 30), "P2": (5, 50), "P7": (25, 100), "P1": (25, 100), "P3": (60, 60)}


def write_bear(root: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    root.mkdir(parents=True)
    meta = {}
    for rid, (options, instances) in sizes.items():
        meta[rid] = {"templates": ["[X] has [Y]."], "answer_space_ids": [f"Q{i}" for i in range(options)]}
        lines = [json.dumps({"sub_id": f"Q{i}"}) for i in range(instances)]
        (root / f"{rid}.jsonl").write_text("\n".join(lines) + "\n\n")  # a blank line is no instance
    (root / "metadata_relations.json").write_text(json.dumps(meta))
    return root


def test_smallest_spaces_first_until_the_test_target():
    # order: P10 (5, by id before P2), P2 (5), P9 (10), P1 (25), P7 (25), P3 (60)
    # cumulative instances 30, 80, 120, 220: test shares (0.8) 24, 64, 96, 176
    assert select_bear_relations(SIZES, 64, 0.2) == ("P10", "P2")
    assert select_bear_relations(SIZES, 65, 0.2) == ("P10", "P2", "P9")
    assert select_bear_relations(SIZES, 100, 0.2) == ("P10", "P2", "P9", "P1")
    assert select_bear_relations(SIZES, 10_000, 0.2) == ("P10", "P2", "P9", "P1", "P7", "P3")  # all there is


def test_stages_of_a_bear_directory_at_two_scales(tmp_path):
    bear = write_bear(tmp_path / "bear", SIZES)
    kissling = tmp_path / "kissling.json"
    kissling.write_text("{}")
    assert bear_sizes(bear)["P2"] == (5, 50)
    stages = profile_stages(0.1, bear, kissling)  # bear target 100 test instances
    # the dropout stage last: the slowest statements, so a long build has the others done first
    assert [s.name for s in stages] == ["bear", "markers", "sweep", "context", "mace", "selective"]
    one = {s.name: s for s in stages}
    assert one["bear"].relations == ("P10", "P2", "P9", "P1")  # 220 × 0.8 = 176 >= 100 > 96
    # every stage pooling over relations keeps >= 6 clusters at any scale (all there are, here)
    assert one["markers"].relations == ("P10", "P2", "P9", "P1", "P7", "P3")
    assert one["sweep"].relations == ("P3",)  # the 60-option relations by id: this BEAR has one
    assert one["selective"].relations == one["markers"].relations
    assert one["selective"].settings["max_instances"] == 6  # ceil(60 × 0.1)
    assert one["markers"].settings["max_instances"] == 10  # ceil(100 × 0.1)
    assert one["context"].settings["max_instances"] == 7  # ceil(64 × 0.1)
    assert one["mace"].settings["max_instances"] == 12
    two = {s.name: s for s in profile_stages(0.2, bear, kissling)}  # target 200
    assert two["bear"].relations == ("P10", "P2", "P9", "P1", "P7")  # 320 × 0.8 = 256 >= 200 > 176
    assert len(two["markers"].relations) == 6
    assert two["sweep"].settings["answer_space_k"] == [5, 10, 20, 40]
    assert two["sweep"].settings["answer_space_draws"] == 3
    assert {s.name: s.bear_templates for s in two.values()} == {
        "bear": "kissling", "markers": "kissling", "selective": None, "sweep": None,
        "context": None, "mace": None,
    }  # fmt: skip
    assert two["bear"].probe_relations[:2] == ["bear-P10", "bear-P2"]
    assert two["context"].probe_relations == ["P37", "P38", "P17", "P19", "P27", "P1412"]


@pytest.mark.skipif(not (DEFAULT_BEAR / "metadata_relations.json").is_file(), reason="no BEAR here")
def test_the_real_bear_at_scale_1_and_2():
    one = {s.name: s for s in profile_stages(1.0)}
    # answer spaces 5, 6, 6, 16, 17, 17, 21, 24, 25; 150+150+150+144+153+153+147+144+150 = 1,341
    # instances, × 0.8 = 1,072.8 >= 1,000 (without P103: 1,191 × 0.8 = 952.8)
    assert one["bear"].relations == ("P105", "P30", "P412", "P403", "P177", "P291", "P2632", "P4552", "P103")
    # the six smallest answer spaces; the sweep on six of BEAR's fourteen 60-option 1:1 relations
    assert one["markers"].relations == one["selective"].relations == (
        "P105", "P30", "P412", "P403", "P177", "P291",
    )  # fmt: skip
    assert one["sweep"].relations == ("P115", "P1376", "P185", "P190", "P26", "P3373")
    assert one["bear"].settings == {
        "dev_fraction": 0.2, "max_instances": 0, "template_kinds": ["curated"], "max_templates": 5,
        "answer_space": "relation",
    }  # fmt: skip
    two = {s.name: s for s in profile_stages(2.0)}
    # + eight 150-instance 25-option relations: 2,541 × 0.8 = 2,032.8 >= 2,000 (seven: 1,912.8)
    assert two["bear"].relations == (
        *one["bear"].relations,
        "P108", "P127", "P1303", "P131", "P137", "P1412", "P1441", "P1532",
    )  # fmt: skip
    assert two["markers"].relations == (*one["markers"].relations, "P2632", "P4552", "P103", "P108",
                                        "P127", "P1303")  # fmt: skip
    assert two["selective"].relations == two["markers"].relations
    assert len(two["sweep"].relations) == 12 and set(one["sweep"].relations) < set(two["sweep"].relations)
    assert two["context"].settings["max_instances"] == 128 and two["mace"].settings["max_instances"] == 240
    assert DEFAULT_KISSLING.is_file() or one["bear"].skipped


def test_sizes_grow_with_scale(tmp_path):
    bear = write_bear(tmp_path / "bear", SIZES)
    kissling = tmp_path / "k.json"
    kissling.write_text("{}")
    previous = None
    for scale in (0.05, 0.1, 0.3, 0.5, 1, 2, 5):
        stages = {s.name: s for s in profile_stages(scale, bear, kissling)}
        size = {
            name: (len(s.relations), s.settings.get("max_instances") or math.inf)
            for name, s in stages.items()
        }
        if previous is not None:
            assert all(size[n][0] >= previous[n][0] and size[n][1] >= previous[n][1] for n in size), scale
        previous = size
    assert previous["context"] == (6, 320) and previous["bear"][0] == len(SIZES)


def test_bear_absent_skips_its_stages_with_the_reason(tmp_path):
    stages = {s.name: s for s in profile_stages(1.0, tmp_path / "nowhere", tmp_path / "k.json")}
    for name in ("bear", "markers", "selective", "sweep"):
        assert stages[name].relations == ()
        assert stages[name].skipped == f"BEAR not found at {tmp_path / 'nowhere'} (give --bear DIR)"
    assert stages["context"].skipped is None and stages["mace"].skipped is None
    assert stages["mace"].relations and all(r.startswith("mace-") for r in stages["mace"].relations)
    # BEAR without Kissling's templates: the stages that need them are skipped, the others run
    bear = write_bear(tmp_path / "bear", SIZES)
    stages = {s.name: s for s in profile_stages(1.0, bear, tmp_path / "k.json")}
    assert (
        stages["bear"].skipped
        == f"Kissling templates not found at {tmp_path / 'k.json'} (give --bear-templates FILE)"
    )
    assert stages["markers"].skipped == stages["bear"].skipped
    assert stages["selective"].skipped is None and len(stages["selective"].relations) == 6
    assert stages["sweep"].relations == ("P3",)


@pytest.mark.parametrize("bad", [0, -1, "x", "nan", "inf"])
def test_a_scale_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match=rf"--scale {bad!r}: "):
        check_scale(bad)
    assert check_scale("0.5") == 0.5


def test_a_stage_setting_is_validated_by_its_options_class():
    with pytest.raises(OptionsError, match=r"dropout_passes=0"):
        Stage("s", "p", "embedded", ("P36",), {"dropout_passes": 0})
    with pytest.raises(OptionsError, match=r"unknown setting\(s\) \['max_relations'\]"):
        Stage("s", "p", "embedded", ("P36",), {"max_relations": 3})
    with pytest.raises(ValueError, match=r"source='wiki'"):
        Stage("s", "p", "wiki", ("P36",), {})
