"""The scoring asset: log-likelihoods of every statement, per model × relation."""

import time

import polars as pl
from dagster import AssetExecutionContext, asset

from assets.partitions import model_relation_partitions, one_dimension_of
from kcal_pipeline.scoring.clm import score_clm
from resources import ModelProvider

# Statement columns repeated in the scores so estimators and SQL need no join.
CARRIED = ["statement_id", "instance_id", "relation_id", "template_id", "option_index", "object_id", "is_gold"]


@asset(
    group_name="scoring", partitions_def=model_relation_partitions, code_version="1",
    ins=one_dimension_of("statements", "relation"),
)
def statement_scores(context: AssetExecutionContext, statements: pl.DataFrame,
                     models: ModelProvider) -> pl.DataFrame:
    """Sentence log-likelihood (start token prepended) and per-token log-probs with roles."""
    key = context.partition_key.keys_by_dimension["model"]
    loaded = models.load(key)
    started, last = time.perf_counter(), [0.0]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 5 or done == total:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            context.log.info(f"scored {done}/{total} statements, {rate:.1f}/s, "
                             f"ETA {(total - done) / max(rate, 1e-9):.0f}s")

    scores = score_clm(
        loaded, statements["text"].to_list(),
        list(zip(statements["subject_start"], statements["subject_end"])),
        list(zip(statements["object_start"], statements["object_end"])),
        progress=progress,
    )
    elapsed = time.perf_counter() - started
    context.add_output_metadata({
        "statements": statements.height, "tokens": int(scores["n_tokens"].sum()),
        "statements_per_s": round(statements.height / elapsed, 1), "device": str(loaded.device),
        "model_revision": loaded.revision,
    })
    return pl.concat([statements.select(CARRIED), scores], how="horizontal").with_columns(
        model_id=pl.lit(models.entry(key).id))
