-- Every estimator across models: accuracy, ACE, Brier, AUROC and AURC with 95 % intervals.
--
-- One row per estimator and model, grouped by estimator so the same estimator reads down the
-- models. headline_metrics over all relations (test split, full answer spaces, the estimator's
-- headline reduction); intervals are the bootstrap ones of the metrics table (clustered by
-- relation). ACE and Brier are NULL for score-valued estimators (Gap, Token, …), which have no
-- calibration; family and output kind come from estimator_status and estimates.
WITH overall AS (
    SELECT model_id, estimator, reduction, metric, value, ci_low, ci_high, n
    FROM headline_metrics
    WHERE scope = 'all' AND metric IN ('accuracy', 'ace', 'brier', 'auroc', 'aurc')
),
families AS (
    SELECT DISTINCT model_id, estimator, family FROM estimator_status
),
kinds AS (
    SELECT DISTINCT model_id, estimator, output_kind FROM estimates
)
SELECT o.estimator, f.family, k.output_kind, o.model_id, o.reduction, max(o.n) AS instances,
       round(max(value) FILTER (WHERE metric = 'accuracy'), 4)   AS accuracy,
       round(max(ci_low) FILTER (WHERE metric = 'accuracy'), 4)  AS accuracy_ci_low,
       round(max(ci_high) FILTER (WHERE metric = 'accuracy'), 4) AS accuracy_ci_high,
       round(max(value) FILTER (WHERE metric = 'ace'), 4)        AS ace,
       round(max(ci_low) FILTER (WHERE metric = 'ace'), 4)       AS ace_ci_low,
       round(max(ci_high) FILTER (WHERE metric = 'ace'), 4)      AS ace_ci_high,
       round(max(value) FILTER (WHERE metric = 'brier'), 4)      AS brier,
       round(max(ci_low) FILTER (WHERE metric = 'brier'), 4)     AS brier_ci_low,
       round(max(ci_high) FILTER (WHERE metric = 'brier'), 4)    AS brier_ci_high,
       round(max(value) FILTER (WHERE metric = 'auroc'), 4)      AS auroc,
       round(max(ci_low) FILTER (WHERE metric = 'auroc'), 4)     AS auroc_ci_low,
       round(max(ci_high) FILTER (WHERE metric = 'auroc'), 4)    AS auroc_ci_high,
       round(max(value) FILTER (WHERE metric = 'aurc'), 4)       AS aurc,
       round(max(ci_low) FILTER (WHERE metric = 'aurc'), 4)      AS aurc_ci_low,
       round(max(ci_high) FILTER (WHERE metric = 'aurc'), 4)     AS aurc_ci_high
FROM overall AS o
LEFT JOIN families AS f USING (model_id, estimator)
LEFT JOIN kinds AS k USING (model_id, estimator)
GROUP BY o.estimator, f.family, k.output_kind, o.model_id, o.reduction
ORDER BY o.estimator, o.model_id;
