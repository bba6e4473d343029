-- Every estimator across models: accuracy, ACE, Brier, AUROC and AURC with 95 % intervals.
--
-- One row per estimator and model, grouped by estimator so the same estimator reads down the
-- models. headline_metrics over all relations (test split, full answer spaces, the estimator's
-- headline reduction); intervals are the bootstrap ones of the metrics table (clustered by
-- relation). ACE and Brier are NULL for score-valued estimators (Gap, Token, …), which have no
-- calibration; family and output kind come from estimator_status and estimates. The metric columns
-- are metric_catalog's headline metrics, each picked by its role and named after its metric.
WITH overall AS (
    SELECT m.model_id, m.estimator, m.reduction, k.role, m.value, m.ci_low, m.ci_high, m.n
    FROM headline_metrics AS m
    JOIN metric_catalog AS k ON k.name = m.metric
    WHERE m.scope = 'all' AND k.headline
),
families AS (
    SELECT DISTINCT model_id, estimator, family FROM estimator_status
),
kinds AS (
    SELECT DISTINCT model_id, estimator, output_kind FROM estimates
)
SELECT o.estimator, f.family, k.output_kind, o.model_id, o.reduction, max(o.n) AS instances,
       round(max(value) FILTER (WHERE role = 'correctness'), 4)       AS accuracy,
       round(max(ci_low) FILTER (WHERE role = 'correctness'), 4)      AS accuracy_ci_low,
       round(max(ci_high) FILTER (WHERE role = 'correctness'), 4)     AS accuracy_ci_high,
       round(max(value) FILTER (WHERE role = 'calibration'), 4)       AS ace,
       round(max(ci_low) FILTER (WHERE role = 'calibration'), 4)      AS ace_ci_low,
       round(max(ci_high) FILTER (WHERE role = 'calibration'), 4)     AS ace_ci_high,
       round(max(value) FILTER (WHERE role = 'proper_score'), 4)      AS brier,
       round(max(ci_low) FILTER (WHERE role = 'proper_score'), 4)     AS brier_ci_low,
       round(max(ci_high) FILTER (WHERE role = 'proper_score'), 4)    AS brier_ci_high,
       round(max(value) FILTER (WHERE role = 'ranking'), 4)           AS auroc,
       round(max(ci_low) FILTER (WHERE role = 'ranking'), 4)          AS auroc_ci_low,
       round(max(ci_high) FILTER (WHERE role = 'ranking'), 4)         AS auroc_ci_high,
       round(max(value) FILTER (WHERE role = 'risk_coverage'), 4)     AS aurc,
       round(max(ci_low) FILTER (WHERE role = 'risk_coverage'), 4)    AS aurc_ci_low,
       round(max(ci_high) FILTER (WHERE role = 'risk_coverage'), 4)   AS aurc_ci_high
FROM overall AS o
LEFT JOIN families AS f USING (model_id, estimator)
LEFT JOIN kinds AS k USING (model_id, estimator)
GROUP BY o.estimator, f.family, k.output_kind, o.model_id, o.reduction
ORDER BY o.estimator, o.model_id;
