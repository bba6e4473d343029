-- The main estimators' accuracy, ACE, Brier and AUROC as 'value [95 % interval]'.
--
-- The main estimators on the headline selection (test split, full answer spaces, all relations)
-- with their 95 % bootstrap intervals (clustered by relation): accuracy, ACE, Brier, AUROC. One row
-- per model, estimator and reduction; main = Base, Margin, Entropy, the template marginal, the
-- recalibrated ones and the MACE estimators (every estimator: kcal sql --query estimators).
WITH overall AS (
    SELECT model_id, estimator, reduction, metric, value, ci_low, ci_high, n
    FROM metrics
    WHERE split = 'test' AND answer_space_k = 0 AND scope = 'all'
      AND metric IN ('accuracy', 'ace', 'brier', 'auroc')
      AND (estimator IN ('base', 'margin', 'entropy', 'template_marginal')
           OR estimator LIKE '%\_temperature' ESCAPE '\' OR estimator LIKE '%\_platt' ESCAPE '\'
           OR estimator LIKE '%\_isotonic' ESCAPE '\' OR estimator LIKE 's%ca\_%' ESCAPE '\')
)
SELECT model_id, estimator, reduction, max(n) AS instances,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE metric = 'accuracy'),
              max(ci_low) FILTER (WHERE metric = 'accuracy'), max(ci_high) FILTER (WHERE metric = 'accuracy')) AS accuracy,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE metric = 'ace'),
              max(ci_low) FILTER (WHERE metric = 'ace'), max(ci_high) FILTER (WHERE metric = 'ace')) AS ace,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE metric = 'brier'),
              max(ci_low) FILTER (WHERE metric = 'brier'), max(ci_high) FILTER (WHERE metric = 'brier')) AS brier,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE metric = 'auroc'),
              max(ci_low) FILTER (WHERE metric = 'auroc'), max(ci_high) FILTER (WHERE metric = 'auroc')) AS auroc
FROM overall
GROUP BY model_id, estimator, reduction
ORDER BY model_id, reduction, estimator;
