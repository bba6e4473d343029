"""Issue 35, the all-fields property: changing any one ProbeOptions or ScoringOptions field to
another valid value changes the data version (assets.runner.expected_version, what `kcal demo`
compares with a partition's stored version) of every asset that reads it, unless the field is in
NO_EFFECT, the documented list of fields that do not change results (the Options docstrings).

Who reads a field is written down here (READERS) and held to the code: every attribute an asset
function reads off its settings resource (found in its source) must be listed, and so must every
option field read by the library code an asset hands its whole settings object to. Fields are
enumerated from the classes, so a new field fails until it is given a change and classified."""

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from assets.definitions import all_assets
from assets.runner import KIND_OF, expected_version
from kcal_pipeline.core.options import ProbeOptions, ScoringOptions
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from resources.settings import declared_reads
from tests.scoring.test_fingerprint_complete import NO_EFFECT_ON_SCORES, SCORING_CHANGES

REPO = Path(__file__).resolve().parents[2]
GROUPS = {"probe": ProbeOptions, "scoring": ScoringOptions}
SETTINGS_TYPES = {"ProbeSettings": "probe", "ScoringSettings": "scoring"}
# One valid change per probe field: (switches both sides need, the field's other value).
PROBE_CHANGES = {
    "answer_space": ({}, "sampled"),
    "answer_space_size": ({}, 10),
    "answer_space_size_one_to_one": ({}, 30),
    "n_negatives": ({}, 3),
    "seed": ({}, 14),
    "perturbation_seeds": ({}, [4]),
    "max_instances": ({}, 20),
    "max_templates": ({}, 2),
    "dev_fraction": ({}, 0.3),
    "capitalize_statements": ({}, False),
    "template_kinds": ({}, ["curated"]),
    "answer_space_k": ({}, [5]),
    "answer_space_draws": ({"answer_space_k": [5]}, 2),
    "page_size": ({}, 100),
    "min_sitelinks": ({}, 10),
    "paraphrase_model": ({}, "another-model"),
    "paraphrase_relations": ({}, ["P36"]),
}
CHANGES = {"probe": PROBE_CHANGES, "scoring": SCORING_CHANGES}
# Fields that change no result (documented in the Options docstrings; nothing may declare them).
NO_EFFECT = {f"scoring.{name}" for name in NO_EFFECT_ON_SCORES}
_PROBE_INSTANCES = ("probe_instances",)
# Which assets read each field (resources/settings.py declared reads must include them).
READERS = {
    "probe.answer_space": _PROBE_INSTANCES,
    "probe.answer_space_size": _PROBE_INSTANCES,
    "probe.answer_space_size_one_to_one": _PROBE_INSTANCES,
    "probe.n_negatives": _PROBE_INSTANCES,  # sampled distractors and MACE questions
    "probe.max_instances": _PROBE_INSTANCES,
    "probe.dev_fraction": _PROBE_INSTANCES,
    "probe.answer_space_k": _PROBE_INSTANCES,
    "probe.answer_space_draws": _PROBE_INSTANCES,
    # sampling and splits; statement variants and contexts; paraphrases; consistency's resamples
    "probe.seed": ("probe_instances", "statements", "generated_templates", "consistency"),
    "probe.perturbation_seeds": ("templates", "statements"),
    "probe.max_templates": ("statements",),
    "probe.capitalize_statements": ("statements",),
    "probe.template_kinds": ("statements",),
    "probe.page_size": ("wikidata_facts", "dropped_facts"),
    "probe.min_sitelinks": ("wikidata_facts", "dropped_facts"),
    "probe.paraphrase_model": ("generated_templates",),
    "probe.paraphrase_relations": ("generated_templates",),
    **{
        f"scoring.{name}": ("statement_scores",)
        for name in SCORING_CHANGES
        if name not in NO_EFFECT_ON_SCORES
    },
}
# Assets that hand their whole settings object to library code, and where that code reads it (the
# name it goes by there): the option fields read there count as the asset's reads. The scoring
# options reach the scorers whole; every field but NO_EFFECT's is a read of statement_scores.
WHOLE_OBJECT = {"probe_instances": ("kcal_pipeline/dataset/instances", "config"), "statement_scores": None}
# Attributes of a settings object that stand for option fields, and those that are no option.
DERIVED = {
    "instance_limit": ("max_instances",),
    "template_limit": ("max_templates",),
    "relation_space_size": ("answer_space_size", "answer_space_size_one_to_one"),
}
NOT_AN_OPTION = {"home"}  # where the store lives
MODEL, RELATION = DEFAULT_MODEL.key, "P36"


def all_fields() -> list[str]:
    return [f"{group}.{name}" for group, cls in GROUPS.items() for name in sorted(cls.model_fields)]


def fields_of(group: str, attribute: str) -> tuple[str, ...]:
    if attribute in NOT_AN_OPTION:
        return ()
    if attribute in GROUPS[group].model_fields:
        return (f"{group}.{attribute}",)
    assert attribute in DERIVED, f"{group} settings .{attribute}: an option? classify it in this test"
    return tuple(f"{group}.{name}" for name in DERIVED[attribute])


def attribute_reads(tree: ast.AST, name: str) -> tuple[set[str], bool]:
    """(attributes read off `name`, whether `name` is also used whole) in a syntax tree."""
    attributes = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", None) == name
    }
    owners = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    whole = any(isinstance(n, ast.Name) and n.id == name and id(n) not in owners for n in ast.walk(tree))
    return attributes, whole


def reads_in_code() -> tuple[dict[str, set[str]], set[str]]:
    """({field: assets whose function reads it}, assets that pass a settings object whole), from
    the asset functions' source and, for WHOLE_OBJECT, the library code they hand it to."""
    readers: dict[str, set[str]] = {}
    whole_passers: set[str] = set()
    for assets_def in all_assets:
        fn = assets_def.op.compute_fn.decorated_fn
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        names = {key.to_user_string() for key in assets_def.keys}
        for param in inspect.signature(fn).parameters.values():
            annotation = getattr(param.annotation, "__name__", param.annotation)
            group = SETTINGS_TYPES.get(str(annotation))
            if group is None:
                continue
            attributes, whole = attribute_reads(tree, param.name)
            whole_passers |= names if whole else set()
            for attribute in attributes:
                for field in fields_of(group, attribute):
                    readers.setdefault(field, set()).update(names)
    for asset, where in WHOLE_OBJECT.items():
        if where is None:
            continue
        folder, name = where
        for path in sorted((REPO / folder).rglob("*.py")):
            attributes, _ = attribute_reads(ast.parse(path.read_text("utf-8")), name)
            for attribute in attributes:
                for field in fields_of("probe", attribute):
                    readers.setdefault(field, set()).add(asset)
    return readers, whole_passers


def settings_with(field: str) -> tuple[dict, dict]:
    """Resources with `field` at its default and changed (both with the switches it needs)."""
    group, name = field.split(".")
    switches, other = CHANGES[group][name]
    base = {"probe_settings": ProbeOptions(), "scoring_settings": ScoringOptions()}
    changed = dict(base)
    base[f"{group}_settings"] = GROUPS[group](**switches)
    changed[f"{group}_settings"] = GROUPS[group](**{**switches, name: other})
    assert base[f"{group}_settings"].values() != changed[f"{group}_settings"].values()
    return base, changed


def dims_of(asset: str) -> dict:
    kind = KIND_OF[asset]
    return {"none": {}, "relation": {"relation": RELATION}, "model": {"model": MODEL}}.get(
        kind, {"model": MODEL, "relation": RELATION}
    )


def test_every_field_is_classified_and_has_a_change():
    fields = all_fields()
    assert sorted(f"probe.{n}" for n in PROBE_CHANGES) == [f for f in fields if f.startswith("probe.")]
    assert sorted(f"scoring.{n}" for n in SCORING_CHANGES) == [f for f in fields if f.startswith("scoring.")]
    unclassified = [f for f in fields if (f in READERS) == (f in NO_EFFECT)]
    assert not unclassified, (
        f"give each a reader (READERS) or document it as not affecting results: {unclassified}"
    )
    assert all(READERS[f] for f in READERS)


def test_the_no_effect_list_is_documented_with_the_options():
    for field in NO_EFFECT:
        group, name = field.split(".")
        assert name in GROUPS[group].__doc__, f"{field}: say in {GROUPS[group].__name__}'s docstring"
    assert "every field" in ProbeOptions.__doc__.lower()  # none of the probe's is exempt


def test_readers_cover_every_read_in_the_code():
    found, whole_passers = reads_in_code()
    assert whole_passers == set(WHOLE_OBJECT), "an asset passes its settings whole: add it to WHOLE_OBJECT"
    # a NO_EFFECT field may be read (chunk_size is), it just changes no result
    missing = {f: sorted(a - set(READERS.get(f, ()))) for f, a in found.items() if f not in NO_EFFECT}
    unlisted = {f: a for f, a in missing.items() if a}
    assert not unlisted, f"reads the code makes that READERS lacks: {unlisted}"


@pytest.mark.parametrize("field", sorted(READERS))
def test_changing_a_field_changes_the_data_version_of_every_asset_that_reads_it(field, tmp_path):
    base, changed = settings_with(field)
    for asset in READERS[field]:
        assert field in declared_reads(asset), f"{asset} reads {field} without declaring it"
        dims = dims_of(asset)
        assert expected_version(tmp_path, asset, dims, base) != expected_version(
            tmp_path, asset, dims, changed
        ), f"{asset} keeps its data version when {field} changes"


@pytest.mark.parametrize("field", sorted(NO_EFFECT))
def test_a_field_without_effect_changes_no_data_version(field, tmp_path):
    base, changed = settings_with(field)
    for assets_def in all_assets:
        for key in assets_def.keys:
            asset = key.to_user_string()
            assert field not in declared_reads(asset)
            dims = dims_of(asset)
            assert expected_version(tmp_path, asset, dims, base) == expected_version(
                tmp_path, asset, dims, changed
            )
