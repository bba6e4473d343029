"""Probe settings shared by the dataset assets; changing them changes the probe."""
from dagster import ConfigurableResource

from kcal_pipeline.probe import ProbeConfig

TEMPLATE_KINDS = ("curated", "generated", "marker_verbal", "marker_numeric", "perturbation")


class ProbeSettings(ConfigurableResource):
    n_negatives: int = 5
    seed: int = 13
    max_instances: int = 100  # per relation; MACE domains take max_instances / 4 per gold count; 0 = all
    max_templates: int = 3    # curated templates per relation (variants follow their parents); 0 = all
    dev_fraction: float = 0.2
    # Which template kinds become statements: curated only by default; add "generated",
    # "marker_verbal", "marker_numeric", "perturbation" for the marker and consistency studies.
    template_kinds: list[str] = ["curated"]
    answer_space_k: int = 0   # > 0: also probe every instance with its answer space cut to k options
    page_size: int = 0        # > 0: page SPARQL results (live Wikidata); 0 = one query per relation
    min_sitelinks: int = 0    # > 0: popularity filter where the endpoint has wikibase:sitelinks
    paraphrase_model: str = ""  # model key that writes generated templates; "" = first registered
    paraphrase_relations: list[str] = []  # relations to paraphrase; empty = every relation
    home: str = ""

    def probe_config(self) -> ProbeConfig:
        bad = [k for k in self.template_kinds if k not in TEMPLATE_KINDS]
        if bad or not self.template_kinds:
            raise ValueError(f"template_kinds {self.template_kinds!r}: each must be one of {TEMPLATE_KINDS}")
        return ProbeConfig(n_negatives=self.n_negatives, seed=self.seed,
                           max_instances=self.max_instances or None, dev_fraction=self.dev_fraction)
