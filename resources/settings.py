"""Settings resources: the probe (dataset assets) and scoring; changing them changes the results."""

from dagster import ConfigurableResource

from kcal_pipeline.dataset.instances.probe import ProbeConfig
from kcal_pipeline.scoring.engine import ScoringOptions

TEMPLATE_KINDS = ("curated", "generated", "marker_verbal", "marker_numeric", "perturbation")


class ProbeSettings(ConfigurableResource):
    n_negatives: int = 5
    seed: int = 13
    max_instances: int = 100  # per relation; MACE domains take max_instances / 4 per gold count; 0 = all
    max_templates: int = 3  # curated templates per relation (variants follow their parents); 0 = all
    dev_fraction: float = 0.2
    # Which template kinds become statements: curated only by default; add "generated",
    # "marker_verbal", "marker_numeric", "perturbation" for the marker and consistency studies.
    template_kinds: list[str] = ["curated"]
    answer_space_k: int = 0  # > 0: also probe every instance with its answer space cut to k options
    page_size: int = 0  # > 0: page SPARQL results (live Wikidata); 0 = one query per relation
    min_sitelinks: int = 0  # > 0: popularity filter where the endpoint has wikibase:sitelinks
    paraphrase_model: str = ""  # model key that writes generated templates; "" = first registered
    paraphrase_relations: list[str] = []  # relations to paraphrase; empty = every relation
    home: str = ""

    def probe_config(self) -> ProbeConfig:
        bad = [k for k in self.template_kinds if k not in TEMPLATE_KINDS]
        if bad or not self.template_kinds:
            raise ValueError(f"template_kinds {self.template_kinds!r}: each must be one of {TEMPLATE_KINDS}")
        return ProbeConfig(
            n_negatives=self.n_negatives,
            seed=self.seed,
            max_instances=self.max_instances or None,
            dev_fraction=self.dev_fraction,
        )


class ScoringSettings(ConfigurableResource):
    """How statement_scores scores (kcal_pipeline/scoring/engine.py); part of its fingerprint, so
    changing a field rescores, and leaving them alone never does."""

    fast_path: bool = True  # CLM prefix packing (same scores as the plain path, ~3× faster)
    mlm_variant: str = "within_word_l2r"  # or "original" (METHODS §1)
    dropout_passes: int = 0  # M > 0 adds ll_sum_dropout / ll_answer_sum_dropout (M values)
    dropout_rate: float | None = 0.1  # None keeps the model's own dropout probabilities
    dropout_seed: int = 0
    subject_mask: bool = False  # adds ll_sum_masked / ll_answer_sum_masked (TemplateDiff)
    placeholder: str = "something"
    chunk_size: int = 1024  # statements per checkpoint: a killed run loses at most one chunk

    def options(self) -> ScoringOptions:
        return ScoringOptions(
            fast_path=self.fast_path,
            mlm_variant=self.mlm_variant,
            dropout_passes=self.dropout_passes,
            dropout_rate=self.dropout_rate,
            dropout_seed=self.dropout_seed,
            subject_mask=self.subject_mask,
            placeholder=self.placeholder,
        )
