"""The settings a user can change, defined once: probe construction and scoring.

The library takes these objects, the Dagster resources subclass them (resources/settings.py) and the
`kcal` command builds its flags from their fields, so a setting has one name, one default, one
description and one validation everywhere. A bad value fails when the object is made, with an
`OptionsError` that names the setting and the value.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TEMPLATE_KINDS = ("curated", "generated", "marker_verbal", "marker_numeric", "perturbation")
MLM_VARIANTS = ("original", "within_word_l2r")  # METHODS §1
MlmVariant = Literal[MLM_VARIANTS]


class OptionsError(ValueError):
    """A setting with a value it cannot take; the message names both."""


def _describe(group: str, error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        field = ".".join(str(x) for x in e["loc"]) or "options"
        value = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{group} setting {field}={value!r}: {msg}" if e["loc"] else f"{group} settings: {msg}")
    return "; ".join(parts)


class Options(BaseModel):
    """Frozen, no unknown fields; construction validates and raises OptionsError."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    GROUP: ClassVar[str] = "options"

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise OptionsError(_describe(self.GROUP, error)) from None

    @classmethod
    def options_class(cls) -> type[Options]:
        """ProbeOptions or ScoringOptions, also for a Dagster resource that subclasses one."""
        return next(c for c in cls.__mro__ if "GROUP" in c.__dict__)

    def values(self) -> dict[str, Any]:
        """The option values only, as plain Python (what fingerprints and provenance record)."""
        return {name: getattr(self, name) for name in self.options_class().model_fields}


class ProbeOptions(Options):
    """How the probe is built: instances, answer spaces, templates, splits."""

    GROUP: ClassVar[str] = "probe"

    n_negatives: int = Field(5, ge=1, description="distractors sampled per instance")
    seed: int = Field(13, description="seed of sampling, splits and template variants")
    max_instances: int = Field(
        100, ge=0, description="instances per relation (MACE: a quarter per gold count); 0 = all"
    )
    max_templates: int = Field(
        3, ge=0, description="curated templates per relation (variants follow their parents); 0 = all"
    )
    dev_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="share of subjects in the dev split")
    template_kinds: list[str] = Field(
        default_factory=lambda: ["curated"],
        min_length=1,
        description="template kinds that become statements",
    )
    answer_space_k: int = Field(
        0, ge=0, description="also probe every instance with k options (gold kept); 0 = off, else >= 2"
    )
    page_size: int = Field(0, ge=0, description="page SPARQL results (live Wikidata); 0 = one query")
    min_sitelinks: int = Field(0, ge=0, description="popularity filter where the endpoint has sitelinks")
    paraphrase_model: str = Field(
        "", description="model key that writes paraphrases; '' = the first registered"
    )
    paraphrase_relations: list[str] = Field(
        default_factory=list, description="relations to paraphrase; empty = every relation"
    )

    @field_validator("template_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = [k for k in kinds if k not in TEMPLATE_KINDS]
        if unknown:
            raise ValueError(f"unknown template kind(s) {unknown}; allowed: {', '.join(TEMPLATE_KINDS)}")
        return kinds

    @model_validator(mode="after")
    def _answer_space_k(self) -> ProbeOptions:
        if self.answer_space_k == 1:
            raise ValueError(
                "answer_space_k=1: a one-option copy is always 'correct'; use 0 (off) or at least 2"
            )
        return self

    @property
    def instance_limit(self) -> int | None:
        return self.max_instances or None

    @property
    def template_limit(self) -> int | None:
        return self.max_templates or None


class ScoringOptions(Options):
    """How statements are scored. Every field but chunk_size is part of the scoring fingerprint."""

    GROUP: ClassVar[str] = "scoring"
    NOT_IN_FINGERPRINT: ClassVar[frozenset[str]] = frozenset({"chunk_size"})

    fast_path: bool = Field(True, description="causal LMs: prefix packing (same scores, ~3x faster)")
    mlm_variant: MlmVariant = Field(
        "within_word_l2r", description="masked LMs: pseudo-log-likelihood variant"
    )
    dropout_passes: int = Field(
        0, ge=0, description="M > 0 adds M stochastic passes (ll_sum_dropout, ll_answer_sum_dropout)"
    )
    dropout_rate: float | None = Field(
        0.1, gt=0.0, lt=1.0, description="dropout probability of those passes; None keeps the model's own"
    )
    dropout_seed: int = Field(0, description="seed of the dropout passes")
    subject_mask: bool = Field(False, description="also score the statement with the subject masked")
    placeholder: str = Field("something", min_length=1, description="text that replaces the subject")
    chunk_size: int = Field(1024, ge=1, description="statements per checkpoint (a killed run loses one)")

    @model_validator(mode="after")
    def _placeholder(self) -> ScoringOptions:
        if not self.placeholder.strip():
            raise ValueError(f"placeholder={self.placeholder!r} must contain a non-space character")
        return self

    def fingerprint_values(self) -> dict[str, Any]:
        """The values scores depend on (chunking does not change a score)."""
        return {k: v for k, v in self.values().items() if k not in self.NOT_IN_FINGERPRINT}
