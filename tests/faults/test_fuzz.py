"""Fuzzing the doors where a user's input enters kcal: settings, the BEAR importer, the catalog.

Whatever the input, the answer is either success or one clear error (a ValueError subclass whose
message names the setting, file or entry) — never another exception, never a half-written store.
"""

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcal_pipeline.core.options import OptionsError, ProbeOptions, ScoringOptions
from kcal_pipeline.dataset.relations import parse_catalog
from kcal_pipeline.dataset.sources.bear.importing import import_bear
from tests.dataset.test_bear import write_bear

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.text(max_size=8), max_size=4),
)


@FUZZ
@given(
    options=st.sampled_from([ProbeOptions, ScoringOptions]),
    values=st.dictionaries(
        st.sampled_from([*ProbeOptions.model_fields, *ScoringOptions.model_fields, "bogus"]),
        ANY_VALUE,
        max_size=4,
    ),
)
def test_settings_are_valid_or_one_error_naming_the_setting(options, values):
    try:
        made = options(**values)
    except OptionsError as error:
        assert any(name in str(error) for name in values), str(error)
        assert "Traceback" not in str(error) and "\n" not in str(error)
        return
    assert options(**made.values()) == made  # what was accepted validates again, unchanged


FLAGS = ["--max-instances", "--answer-space-k", "--dropout-rate", "--template-kinds", "--mlm-variant",
         "--chunk-size", "--dev-fraction", "--n-negatives", "--perturbation-seeds"]  # fmt: skip


@FUZZ
@given(flag_values=st.lists(st.tuples(st.sampled_from(FLAGS), st.text(max_size=6)), max_size=3))
def test_demo_flags_parse_and_validate_or_exit_with_usage(flag_values):
    from assets.cli import build_parser, option_values

    argv = ["demo", *[part for flag, value in flag_values for part in (flag, value)]]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse's own usage error (bad type or choice): exit code 2
        assert exit_.code == 2
        return
    for options in (ProbeOptions, ScoringOptions):
        try:
            options(**option_values(args, options))
        except OptionsError as error:
            assert str(error).startswith(options.GROUP)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


MUTATIONS = ["truncate", "garbage_bytes", "drop_key", "wrong_type", "bad_json", "latin1"]


@FUZZ
@given(
    mutation=st.sampled_from(MUTATIONS),
    target=st.sampled_from(["metadata_relations.json", "P19.jsonl", "P36.jsonl"]),
    at=st.integers(min_value=0, max_value=400),
    junk=st.binary(min_size=1, max_size=8),
)
def test_a_damaged_bear_directory_is_imported_or_refused_by_name(
    tmp_path_factory, mutation, target, at, junk
):
    base = tmp_path_factory.mktemp("fuzz")
    src, home = write_bear(base / "BEAR"), base / "home"
    import_bear(write_bear(base / "first"), home, log=lambda _: None)  # a store with an earlier import
    before = _tree(home)
    path = src / target
    data = path.read_bytes()
    if mutation == "truncate":
        data = data[: at % max(len(data), 1)]
    elif mutation == "garbage_bytes":
        data = data[: at % max(len(data), 1)] + junk + data[at % max(len(data), 1) :]
    elif mutation == "latin1":
        data = data.decode("utf-8").encode("latin-1", errors="replace") + b"\xe9\xff"
    elif mutation in ("drop_key", "wrong_type", "bad_json"):
        lines = data.decode("utf-8").splitlines()
        i = at % len(lines)
        try:
            obj = json.loads(lines[i]) if target.endswith(".jsonl") else json.loads(data)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and obj:
            key = sorted(obj)[at % len(obj)]
            if mutation == "drop_key":
                obj.pop(key)
            elif mutation == "wrong_type":
                obj[key] = [1, {"x": None}] if isinstance(obj[key], str) else "text"
            else:
                obj = "{" + json.dumps(obj)[: at % 20]
        text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        if target.endswith(".jsonl"):
            lines[i] = text
            data = ("\n".join(lines) + "\n").encode("utf-8")
        else:
            data = text.encode("utf-8")
    path.write_bytes(data)
    try:
        import_bear(src, home, log=lambda _: None)
    except ValueError as error:  # BearFormatError, InvalidIdError, TemplateError are ValueErrors
        message = str(error)
        assert target in message or str(src) in message, message
        assert _tree(home) == before  # nothing half-written: the earlier import is intact
    leftovers = [p for p in home.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    shutil.rmtree(base)


@FUZZ
@given(
    entry=st.dictionaries(
        st.sampled_from(["label", "kind", "property", "object_type", "subject_type", "templates", "domain",
                         "source", "answer_space", "bogus"]),
        ANY_VALUE,
        max_size=7,
    ),
    rid=st.sampled_from(["P36", "P1", "mace-x", "../x", "P 1", ""]),
)  # fmt: skip
def test_a_catalog_entry_is_parsed_or_refused_by_name(entry, rid):
    try:
        specs = parse_catalog({rid: entry}, origin="fuzz.toml")
    except ValueError as error:
        assert "fuzz.toml" in str(error) or repr(rid) in str(error) or rid in str(error), str(error)
        return
    assert list(specs) == [rid] and "/" not in rid and " " not in rid
    assert all("[X]" in t and "[Y]" in t for t in specs[rid].templates)
