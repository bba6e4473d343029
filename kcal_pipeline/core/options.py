"""The settings a user can change, defined once: probe construction and scoring.

The library takes these objects, the Dagster resources subclass them (resources/settings.py) and the
`kcal` command builds its flags from their fields, so a setting has one name, one default, one
description and one validation everywhere. A bad value fails when the object is made, with an
`OptionsError` that names the setting and the value.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# "question": question-answer templates with the answer last (MACE), read by the answer-conditional
# estimators; relations without questions (closed-set ones) simply have none.
# "context_*": the parent template after demonstrations it is conditioned on, never scored
# (dataset/instances/context.py): 1 or 3 true facts, a wrong one, or Zhao et al.'s fixed one.
CONTEXT_TEMPLATE_KINDS = ("context_1shot", "context_3shot", "context_wrong", "context_fixed")
TEMPLATE_KINDS = (
    "curated", "generated", "marker_verbal", "marker_numeric", "perturbation", "question",
    *CONTEXT_TEMPLATE_KINDS,
)  # fmt: skip
MLM_VARIANTS = ("original", "within_word_l2r")  # METHODS §1
MlmVariant = Literal[MLM_VARIANTS]
# How closed-set options are formed (METHODS §1, §5); see dataset/instances/probe.py build_instances.
ANSWER_SPACE_MODES = ("relation", "sampled")
AnswerSpaceMode = Literal[ANSWER_SPACE_MODES]


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
    """How the probe is built: instances, answer spaces, templates, splits.

    Every field changes results: each is a declared read (resources/settings.py) of every asset
    that uses it, so changing one changes those assets' data versions (they and what reads them
    rerun); tests/assets/test_options_property.py holds every field to that."""

    GROUP: ClassVar[str] = "probe"

    answer_space: AnswerSpaceMode = Field(
        "relation",
        description="closed-set options: 'relation' = one answer space per relation from its facts "
        "(BEAR), 'sampled' = gold + n_negatives distractors per instance (Tinner)",
    )
    answer_space_size: int = Field(
        25, ge=2, description="answer_space=relation: options per instance (BEAR's N:1 size; gold kept)"
    )
    answer_space_size_one_to_one: int = Field(
        60, ge=2, description="answer_space=relation: options per instance of a one_to_one relation (BEAR)"
    )
    n_negatives: int = Field(
        5, ge=1, description="distractors per instance for answer_space=sampled and MACE questions"
    )
    seed: int = Field(
        13, description="seed of sampling, splits, context demonstrations and answer-space subsamples"
    )
    perturbation_seeds: list[int] = Field(
        default_factory=lambda: [4, 44, 99],
        min_length=1,
        description="seeds of the random perturbations (extra space, typo): each is drawn once per "
        "seed, as Zhao et al. do (4, 44, 99), so consistency reports each seed and their mean and spread",
    )
    max_instances: int = Field(
        100, ge=0, description="instances per relation (MACE: a quarter per gold count); 0 = all"
    )
    max_templates: int = Field(
        5, ge=0, description="curated templates per relation (variants follow their parents); 0 = all"
    )
    dev_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="share of subjects in the dev split")
    capitalize_statements: bool = Field(
        True,
        description="upper-case each statement's first letter, as lm-pub-quiz does (a sentence that "
        "opens in lower case reads as odd text to an LM); statements.capitalized marks the changed ones",
    )
    template_kinds: list[str] = Field(
        default_factory=lambda: ["curated", "question"],
        min_length=1,
        description="template kinds that become statements",
    )
    answer_space_k: list[int] = Field(
        default_factory=list,
        description="the option-count sweep (Kissling et al. §5.4): also probe every instance with its "
        "answer space cut to each k (golds kept), e.g. 5,10,20,30,60; a single k works too; "
        "empty or 0 = off, else each k >= 2",
    )
    answer_space_draws: int = Field(
        3,
        ge=1,
        description="draws per k of the option-count sweep, each its own seeded subsample "
        "(answer_space_draw 1..N): the sweep reports the mean and spread over them",
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

    @field_validator("perturbation_seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        negative = [s for s in seeds if s < 0]
        if negative:
            raise ValueError(f"seeds must be non-negative, got {negative}")
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        if repeated:
            raise ValueError(f"seeds must be distinct, got {repeated} more than once")
        return seeds

    @field_validator("answer_space_k", mode="before")
    @classmethod
    def _answer_space_ks(cls, ks: object) -> object:
        """A bare k (an int, or "5" from a config) is a sweep of one; 0 alone means off."""
        if isinstance(ks, int | str) and not isinstance(ks, bool):
            ks = [ks]
        if isinstance(ks, list | tuple) and [str(k).strip() for k in ks] == ["0"]:
            return []
        return ks

    @field_validator("answer_space_k")
    @classmethod
    def _sorted_ks(cls, ks: list[int]) -> list[int]:
        return sorted(ks)  # one spelling per sweep: 10,5 and 5,10 are the same run

    @model_validator(mode="after")
    def _answer_space_k(self) -> ProbeOptions:
        ks = self.answer_space_k
        shown = ks[0] if len(ks) == 1 else ",".join(map(str, ks))
        if 1 in ks:
            raise ValueError(
                f"answer_space_k={shown}: a one-option copy is always 'correct'; use 0 (off) or at least 2"
            )
        if any(k < 1 for k in ks):
            raise ValueError(f"answer_space_k={shown}: every k must be >= 2 (0 alone switches the sweep off)")
        repeated = sorted({k for k in ks if ks.count(k) > 1})
        if repeated:
            raise ValueError(f"answer_space_k={shown}: each k once, got {repeated} more than once")
        return self

    @property
    def instance_limit(self) -> int | None:
        return self.max_instances or None

    @property
    def template_limit(self) -> int | None:
        return self.max_templates or None

    def relation_space_size(self, kind: str) -> int:
        """The cap of a relation's answer space (answer_space=relation): BEAR gives its 1:1
        relations 60 options and its N:1 relations (mostly) 25."""
        return self.answer_space_size_one_to_one if kind == "one_to_one" else self.answer_space_size


class ScoringOptions(Options):
    """How statements are scored. Every field but chunk_size is part of the scoring fingerprint
    and a declared read of statement_scores, so changing one rescores. chunk_size (statements
    per checkpoint) only cuts the work into resumable pieces: it changes no score, and it is the
    one probe or scoring option that changes no result (NOT_IN_FINGERPRINT)."""

    GROUP: ClassVar[str] = "scoring"
    NOT_IN_FINGERPRINT: ClassVar[frozenset[str]] = frozenset({"chunk_size"})

    fast_path: bool = Field(True, description="causal LMs: prefix packing (same scores, ~3x faster)")
    mlm_variant: MlmVariant = Field(
        "within_word_l2r", description="masked LMs: pseudo-log-likelihood variant"
    )
    dropout: bool = Field(
        False,
        description="also score M stochastic passes with the model's own dropout on "
        "(ll_sum_dropout, ll_answer_sum_dropout: DropoutMean/DropoutVar)",
    )
    dropout_passes: int = Field(30, ge=1, description="M: stochastic passes per statement, as in the paper")
    dropout_rate: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="dropout probability for a model without dropout of its own (SmolLM2 needs "
        "one); ignored for a model with dropout, which keeps its own",
    )
    dropout_seed: int = Field(0, description="seed of the dropout passes (pass p uses seed + p)")
    subject_mask: bool = Field(
        False,
        description="also score the statement with the subject masked (TemplateDiff): "
        "masked LMs by one mask token per subject token, causal LMs by the placeholder",
    )
    placeholder: str = Field(
        "something", min_length=1, description="causal LMs: the text that replaces a masked subject"
    )
    chunk_size: int = Field(1024, ge=1, description="statements per checkpoint (a killed run loses one)")

    @model_validator(mode="after")
    def _placeholder(self) -> ScoringOptions:
        if not self.placeholder.strip():
            raise ValueError(f"placeholder={self.placeholder!r} must contain a non-space character")
        return self

    @model_validator(mode="after")
    def _switched_on(self) -> ScoringOptions:
        """A setting of a switched-off score would be silently ignored: say so instead. Compared
        with the default (not 'was it given'), as Dagster passes every field of a resource."""
        inert = [
            (name, switch)
            for name, switch in (
                ("dropout_passes", "dropout"),
                ("dropout_rate", "dropout"),
                ("dropout_seed", "dropout"),
                ("placeholder", "subject_mask"),
            )
            if not getattr(self, switch) and getattr(self, name) != type(self).model_fields[name].default
        ]
        if inert:
            name, switch = inert[0]
            raise ValueError(
                f"{name}={getattr(self, name)!r} has no effect while {switch} is off; "
                f"switch it on ({switch}=True, --{switch.replace('_', '-')}) or leave {name} out"
            )
        return self

    def fingerprint_values(self) -> dict[str, Any]:
        """The values scores depend on (chunking does not change a score)."""
        return {k: v for k, v in self.values().items() if k not in self.NOT_IN_FINGERPRINT}


class GenerationOptions(Options):
    """How open answers are drawn (issue 33; MACE's setting): `kcal demo --generate` and the
    generation stage. Every field is part of the generations' data version, so changing one reruns
    exactly the generation partitions and what reads them."""

    GROUP: ClassVar[str] = "generation"

    n_samples: int = Field(
        10, ge=1, description="sampled answers per question besides the greedy one (MACE: 10)"
    )
    temperature: float = Field(1.0, gt=0.0, le=5.0, description="sampling temperature of the sampled answers")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus (top-p) of the sampled answers; 1 = off")
    max_new_tokens: int = Field(
        16,
        ge=1,
        le=256,
        description="new tokens of an answer (the verbal prompts get more: see docs/methods.md)",
    )
    generation_seed: int = Field(0, ge=0, description="seed of the sampled answers (per question and prompt)")
    prompted: bool = Field(
        True,
        description="also ask the verbal and double-turn prompts (Verb, Verb-Topk, Consis-Verb, P_True, "
        "Self-Ask: ten of MACE's fifteen methods; ~3x the generation time)",
    )
