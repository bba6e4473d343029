"""Validation of identifiers before they reach a path, a SPARQL query or SQL.

Every id that comes from a user, a registry file or an endpoint passes through here first, so
that a model id can never escape KCAL_HOME and an entity id can never inject query text.
"""

from __future__ import annotations

import hashlib
import re

WIKIDATA_ENTITY_IRI = "http://www.wikidata.org/entity/"
# Entities of the embedded snapshot for which no cited source carries a Wikidata QID live here
# (snapshot/ids.py). The .invalid TLD is reserved (RFC 2606), so such an IRI can never be
# mistaken for a resolvable one.
PROJECT_ENTITY_IRI = "https://kcal.invalid/entity/"
PROJECT_PREFIX = "kcal:"

_QID = re.compile(r"^Q[1-9][0-9]*$")
_PID = re.compile(r"^P[1-9][0-9]*$")
_PROJECT_LOCAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_RELATION_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_MODEL_KEY_BAD = re.compile(r"[^A-Za-z0-9._-]+")


class InvalidIdError(ValueError):
    """An identifier failed validation; the message names the field and the value."""


def _fail(field: str, value: object, expected: str) -> InvalidIdError:
    return InvalidIdError(f"invalid {field} {value!r}: expected {expected}")


def check_qid(value: str, field: str = "entity id") -> str:
    if not isinstance(value, str) or not _QID.match(value):
        raise _fail(field, value, "a Wikidata item id like 'Q42'")
    return value


def check_pid(value: str, field: str = "property id") -> str:
    if not isinstance(value, str) or not _PID.match(value):
        raise _fail(field, value, "a Wikidata property id like 'P36'")
    return value


def check_entity_id(value: str, field: str = "entity id") -> str:
    """An entity is a Wikidata QID ('Q142') or a project id ('kcal:country-FR')."""
    if isinstance(value, str):
        if _QID.match(value):
            return value
        if value.startswith(PROJECT_PREFIX) and _PROJECT_LOCAL.match(value[len(PROJECT_PREFIX) :]):
            return value
    raise _fail(field, value, "a Wikidata QID like 'Q142' or a project id like 'kcal:country-FR'")


def check_relation_id(value: str, field: str = "relation id") -> str:
    """Relation ids become partition keys and path segments, so they are kept to a tight alphabet."""
    if not isinstance(value, str) or not _RELATION_ID.match(value):
        raise _fail(field, value, "a letter followed by up to 63 letters, digits, '_' or '-' (e.g. 'P36')")
    return value


def entity_iri(entity_id: str) -> str:
    """The IRI of an entity id; validated, so safe to place inside <...> in SPARQL."""
    check_entity_id(entity_id)
    if entity_id.startswith(PROJECT_PREFIX):
        return PROJECT_ENTITY_IRI + entity_id[len(PROJECT_PREFIX) :]
    return WIKIDATA_ENTITY_IRI + entity_id


def entity_id_from_iri(iri: str) -> str:
    """Inverse of entity_iri; raises for IRIs outside the two known namespaces."""
    for base, prefix in ((WIKIDATA_ENTITY_IRI, ""), (PROJECT_ENTITY_IRI, PROJECT_PREFIX)):
        if isinstance(iri, str) and iri.startswith(base):
            return check_entity_id(prefix + iri[len(base) :], "entity IRI")
    raise _fail("entity IRI", iri, f"an IRI under {WIKIDATA_ENTITY_IRI} or {PROJECT_ENTITY_IRI}")


def model_key(model_id: str) -> str:
    """A filesystem- and partition-safe key for a model id.

    'HuggingFaceTB/SmolLM2-135M' -> 'HuggingFaceTB--SmolLM2-135M'. Anything outside [A-Za-z0-9._-]
    becomes '-', leading dots are dropped and '..' cannot survive, so the key is always one plain
    path segment. Ids that had to be altered beyond the '/' mapping get a short hash suffix so two
    different ids cannot silently share a key.
    """
    if not isinstance(model_id, str) or not model_id.strip():
        raise _fail("model id", model_id, "a non-empty string")
    simple = model_id.strip().replace("/", "--")
    key = _MODEL_KEY_BAD.sub("-", simple)
    key = re.sub(r"\.{2,}", ".", key).strip(".-") or "model"
    if key != simple:
        key = f"{key[:80]}-{hashlib.sha256(model_id.encode()).hexdigest()[:8]}"
    return key[:100]
