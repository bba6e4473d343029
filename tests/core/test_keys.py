import pytest

from kcal_pipeline.core.keys import (
    InvalidIdError,
    check_entity_id,
    check_relation_id,
    entity_id_from_iri,
    entity_iri,
    model_key,
)


@pytest.mark.parametrize(
    "model_id",
    [
        "../../etc/passwd",
        "a/b",
        "/abs/path",
        "..",
        ".",
        "x/../../y",
        "C:\\win\\path",
        "name with spaces",
        "ümlaut/модель",
        "a" * 500,
        "-leading",
        "trailing.",
    ],
)
def test_model_key_is_one_safe_path_segment(model_id, tmp_path):
    key = model_key(model_id)
    assert key and "/" not in key and "\\" not in key and ".." not in key
    assert not key.startswith(".") and len(key) <= 100
    assert (tmp_path / key).resolve().parent == tmp_path.resolve()


def test_model_key_keeps_hub_ids_readable_and_distinct():
    assert model_key("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB--SmolLM2-135M-Instruct"
    assert model_key("a b") != model_key("a_b") != model_key("a-b")
    assert model_key("a b") != model_key("a?b")


@pytest.mark.parametrize("bad", ["", None, " "])
def test_model_key_rejects_empty(bad):
    with pytest.raises(InvalidIdError, match="model id"):
        model_key(bad)


@pytest.mark.parametrize("bad", ["Q0", "Q1 }", "Q1> . ?s ?p ?o", "kcal:", "kcal:../x", "P31", "wd:Q5"])
def test_entity_ids_reject_query_text(bad):
    with pytest.raises(InvalidIdError, match="entity id"):
        check_entity_id(bad)


def test_entity_iri_round_trip():
    for eid in ["Q6256", "kcal:country-FR", "kcal:city-FR-paris"]:
        assert entity_id_from_iri(entity_iri(eid)) == eid
    with pytest.raises(InvalidIdError, match="entity IRI"):
        entity_id_from_iri("http://example.org/Q5")


@pytest.mark.parametrize("bad", ["", "1P", "P36/../x", "P 36", "a" * 65, "P36=x"])
def test_relation_ids_are_path_safe(bad):
    with pytest.raises(InvalidIdError, match="relation id"):
        check_relation_id(bad)
