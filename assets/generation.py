"""Open-answer probing (issue 33; MACE's own setting), on demand: `kcal demo --generate` or the
generation jobs in the UI.

generation (model × relation): `generations` asks each probe instance its open question (a greedy
answer, N sampled ones, and the verbal and double-turn prompts), then `generation_estimates`
matches the answers to entities and runs every generation estimator. gen_metrics (per
model): `generation_metrics` — accuracy, confidence, calibration and AUROC per gold count and MACE
mixture, and knowledge coverage. The model's report shows them when they exist.

Two stages of their own, never part of a plain `kcal demo`: drawing answers costs minutes per
relation on a CPU, and only relations with question templates (the MACE domains) can be asked.
"""

import polars as pl
from dagster import (
    AllPartitionMapping,
    AssetExecutionContext,
    AssetIn,
    AssetOut,
    MetadataValue,
    Output,
    asset,
    multi_asset,
)

from assets.instance import SCORING_POOL, SCORING_QUEUE
from assets.partitions import model_partitions, model_relation_partitions, one_dimension_of
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.progress import terminal_stream
from kcal_pipeline.core.storage import existing_partitions, read_partition
from kcal_pipeline.core.versions import code_version
from kcal_pipeline.dataset.instances.open_questions import answer_names, entity_aliases, open_questions
from kcal_pipeline.dataset.relations import get_relation
from kcal_pipeline.estimation.answer_matching import AnswerIndex
from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS, estimate_generations
from kcal_pipeline.evaluation.generation import coverage_metrics
from kcal_pipeline.evaluation.generation import generation_metrics as metrics_of
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.scoring.open_answers import GENERATION_VERSION, generate_partition
from resources import GenerationResource, ModelProvider
from resources.settings import generation_reads, reads

GENERATION = "generation"
# The answer index reads the relation's facts and every facts table's aliases: a re-import reruns it.
FACT_READS = reads("relation_tables:wikidata_facts")
GEN_METRICS = "gen_metrics"
# The answer prompt's responses, matched: what knowledge coverage and the matching checks read.
MATCH_COLUMNS = [
    "model_id", "relation_id", "instance_id", "sample", "response", "logprob_sum", "n_scored",
    "status", "entity_id", "cluster", "correct",
]  # fmt: skip


@reads("model", "relation", *generation_reads())
@asset(
    group_name=GENERATION,
    pool=SCORING_POOL,
    op_tags={"dagster-celery/queue": SCORING_QUEUE},
    partitions_def=model_relation_partitions,
    code_version=GENERATION_VERSION,  # what is drawn for the same inputs (scoring/open_answers.py)
    ins=one_dimension_of("probe_instances", "relation"),
)
def generations(
    context: AssetExecutionContext,
    probe_instances: pl.DataFrame,
    models: ModelProvider,
    generation_settings: GenerationResource,
) -> pl.DataFrame:
    """Each instance's open question answered: the greedy answer and N sampled ones with their
    log-probabilities and entropies, and (setting `prompted`) the verbal and double-turn prompts.
    Resumable in chunks of questions; the settings and the model are part of its data version."""
    dims = context.partition_key.keys_by_dimension
    questions = open_questions(get_relation(dims["relation"]), probe_instances)
    entry = models.entry(dims["model"])
    result = generate_partition(
        models.load(dims["model"]),
        questions,
        generation_settings,
        kcal_home(models.home or None),
        dims["relation"],
        log=context.log.info,
        stream=terminal_stream(),
    )
    context.add_output_metadata(result.metadata)
    return result.frame.with_columns(model_id=pl.lit(entry.id), relation_id=pl.lit(dims["relation"]))


def answer_indexes(home, relation: str, instances: pl.DataFrame) -> dict[str, AnswerIndex]:
    """Each instance's AnswerIndex: its gold entities and the relation's other entities, by their
    labels and every alias a facts table of the store records."""
    facts = read_partition(home, "wikidata_facts", {"relation": relation})
    every_fact = [pl.read_parquet(path) for path in existing_partitions(home, "wikidata_facts")]
    names = answer_names(instances, facts, entity_aliases(every_fact))
    return {instance_id: AnswerIndex(gold, others) for instance_id, (gold, others) in names.items()}


@FACT_READS
@multi_asset(
    group_name=GENERATION,
    partitions_def=model_relation_partitions,
    ins=one_dimension_of("probe_instances", "relation"),
    outs={
        "generation_estimates": AssetOut(
            code_version=code_version("1", GENERATION_ESTIMATORS),
            description="Per instance and generation estimator (MACE's 15 methods and SCA/SNCA/SFCA): "
            "the predicted answer (its entity, or its text), whether it is gold, the confidence, and "
            "why an instance has none (refusal).",
        ),
        "generation_status": AssetOut(
            code_version=code_version("1", GENERATION_ESTIMATORS),
            description="Each generation estimator: ran or skipped (and why), its answered and refused "
            "instances, refusals by reason.",
        ),
        "generation_matches": AssetOut(
            code_version=code_version("1", GENERATION_ESTIMATORS),
            description="Every answer-prompt response matched: correct (a gold entity), "
            "wrong_known_entity (another entity of the relation) or unmatched, with its cluster.",
        ),
    },
)
def generation_estimates(
    context: AssetExecutionContext,
    generations: pl.DataFrame,
    probe_instances: pl.DataFrame,
    models: ModelProvider,
):
    """Answers matched to entities by rule (estimation/answer_matching.py), then every registered
    generation estimator; a method whose prompts are missing is skipped with its reason."""
    dims = context.partition_key.keys_by_dimension
    home = kcal_home(models.home or None)
    indexes = answer_indexes(home, dims["relation"], probe_instances)
    keys = {"model_id": generations["model_id"][0], "relation_id": dims["relation"]}
    splits = probe_instances.select("instance_id", "split")
    result = estimate_generations(generations.drop("model_id", "relation_id"), indexes)

    def keyed(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(**{k: pl.lit(v) for k, v in keys.items()})

    estimates = keyed(result.estimates.join(splits, on="instance_id", how="left"))
    matches = keyed(result.matches)
    status = keyed(result.status)
    counts = matches.group_by("status").len().sort("status")
    yield Output(
        estimates,
        output_name="generation_estimates",
        metadata={
            "rows": estimates.height,
            "instances": estimates["instance_id"].n_unique(),
            "answers": MetadataValue.md("\n".join(f"- {s}: {n}" for s, n in counts.iter_rows())),
        },
    )
    skipped = status.filter(pl.col("status") == "skipped")
    yield Output(
        status,
        output_name="generation_status",
        metadata={
            "ran": status.height - skipped.height,
            "skipped": MetadataValue.md(
                "\n".join(f"- {e}: {why}" for e, why in skipped.select("estimator", "reason").iter_rows())
                or "none"
            ),
        },
    )
    yield Output(
        matches.select(MATCH_COLUMNS), output_name="generation_matches", metadata={"rows": matches.height}
    )


@multi_asset(
    group_name=GEN_METRICS,
    partitions_def=model_partitions,
    ins={
        **one_dimension_of("generation_estimates", "model"),
        **one_dimension_of("generation_matches", "model"),
        "probe_instances": AssetIn(partition_mapping=AllPartitionMapping()),
    },
    outs={
        "generation_metrics": AssetOut(
            # 2: 95 % bootstrap intervals (ci_low, ci_high) on the test split
            code_version=code_version("2", METRICS, GENERATION_ESTIMATORS),
            description="Accuracy, mean confidence, AUROC, ECE/ACE and Brier of every generation "
            "estimator per split, relation, gold count (1a/2a/4a/6a) and MACE mixture, the share of "
            "instances each answered, and knowledge coverage (clusters above τ = 0.1) per gold count, "
            "with 95 % bootstrap intervals on the test split.",
        ),
    },
)
def generation_metrics(
    generation_estimates: pl.DataFrame,
    generation_matches: pl.DataFrame,
    probe_instances: pl.DataFrame,
    relations: pl.DataFrame,
):
    """The evaluation stage's metrics on the generation estimates, over every relation the model
    answered open questions on."""
    from kcal_pipeline.estimation.generation import knowledge_coverage

    answered = probe_instances.join(
        generation_estimates.select("relation_id", "instance_id").unique(), on=["relation_id", "instance_id"]
    )
    frame = metrics_of(generation_estimates, answered, relations)
    coverage = pl.concat(
        [
            knowledge_coverage(
                group.drop("relation_id"),
                answered.filter(pl.col("relation_id") == relation).select("instance_id", "n_gold"),
            ).with_columns(relation_id=pl.lit(relation), model_id=pl.lit(group["model_id"][0]))
            for (relation,), group in generation_matches.group_by("relation_id", maintain_order=True)
        ]
    )
    frame = pl.concat([frame, coverage_metrics(coverage, answered, relations).select(frame.columns)])
    yield Output(frame, output_name="generation_metrics", metadata={"rows": frame.height})
