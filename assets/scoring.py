"""The scoring stage: log-likelihoods of every statement, per model × relation."""

import polars as pl
from dagster import AssetExecutionContext, MetadataValue, asset

from assets.instance import SCORING_POOL, SCORING_QUEUE
from assets.partitions import model_relation_partitions, one_dimension_of
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.progress import terminal_stream
from kcal_pipeline.scoring.models.provenance import weights_provenance
from kcal_pipeline.scoring.partition import score_partition
from resources import ModelProvider, ScoringSettings
from resources.settings import reads, scoring_reads

# The UI's "Plots" toggle charts every numeric metadata entry across partitions. Rates and sizes
# (statements_per_s, tokens_per_s, statements, tokens) compare across partitions; how this run's work
# went (chunks, chunks resumed from checkpoints, seconds) does not, so those are shown as text.
RUN_COUNTERS = ("chunks", "chunks_resumed", "seconds")


def plotted_fairly(metadata: dict) -> dict:
    """The partition's metadata with the run's counters as text (not charted by the UI)."""
    return {k: MetadataValue.text(str(v)) if k in RUN_COUNTERS else v for k, v in metadata.items()}


@reads("model", *scoring_reads())
@asset(
    group_name="scoring",
    pool=SCORING_POOL,
    # on the Celery executor (assets/engine.py), only workers started with `-q scoring` (GPU hosts) take it
    op_tags={"dagster-celery/queue": SCORING_QUEUE},
    partitions_def=model_relation_partitions,
    # 3: dropout/subject-mask record columns, mask tokens for masked LMs; 4: model_kind;
    # 5: a statement's context (statements.context_end) is conditioned on, in no reduction
    code_version="5",
    ins=one_dimension_of("statements", "relation"),
)
def statement_scores(
    context: AssetExecutionContext,
    statements: pl.DataFrame,
    models: ModelProvider,
    scoring_settings: ScoringSettings,
) -> pl.DataFrame:
    """Sentence log-likelihood (start token prepended; pseudo-log-likelihood for masked LMs),
    per-token log-probs with roles, optional dropout and subject-masked scores. Resumable in
    chunks; unchanged inputs are not rescored (see kcal_pipeline/scoring/partition.py)."""
    dims = context.partition_key.keys_by_dimension
    loaded, entry = models.load(dims["model"]), models.entry(dims["model"])
    result = score_partition(
        loaded,
        entry.id,
        statements,
        scoring_settings,
        kcal_home(models.home or None),
        dims["relation"],
        scoring_settings.chunk_size,
        log=context.log.info,
        stream=terminal_stream(),
    )  # the CLI's terminal, when `kcal demo` runs in one
    # which weights ran, in words (model_revision names the file only by its hash's origin)
    context.add_output_metadata(
        {**weights_provenance(entry, loaded.dtype), **plotted_fairly(result.metadata)}
    )
    return result.frame
