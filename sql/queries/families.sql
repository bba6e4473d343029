-- Causal vs masked models paired by accuracy: main estimators side by side, masked − causal.
--
-- Causal vs masked models: each causal model paired with the masked model of nearest accuracy
-- (Base, reduction sum, test split, full answer spaces, all relations; kcal_pipeline/evaluation/
-- families.py), then the main estimators' headline metrics side by side, masked − causal, and each
-- model's 95 % bootstrap interval. Empty until a causal and a masked model both have metrics; every
-- split, scope and metric: the family_comparison table. Main estimators (estimator_catalog.main)
-- and headline metrics (metric_catalog.headline) only.
SELECT causal_model_id, masked_model_id, round(accuracy_gap, 4) AS accuracy_gap,
       estimator, reduction, metric, higher_is_better,
       round(causal_value, 4) AS causal, round(masked_value, 4) AS masked,
       round(masked_minus_causal, 4) AS masked_minus_causal,
       CASE WHEN causal_ci_low IS NOT NULL
            THEN printf('[%.3f, %.3f]', causal_ci_low, causal_ci_high) END AS causal_ci,
       CASE WHEN masked_ci_low IS NOT NULL
            THEN printf('[%.3f, %.3f]', masked_ci_low, masked_ci_high) END AS masked_ci
FROM family_comparison
WHERE split = 'test' AND full_answer_space(answer_space_k) AND scope = 'all'
  AND metric IN (SELECT name FROM metric_catalog WHERE headline)
  AND estimator IN (SELECT name FROM estimator_catalog WHERE main)
ORDER BY accuracy_gap, causal_model_id, estimator, reduction, metric;
