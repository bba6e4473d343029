-- The main estimators' accuracy, ACE, Brier and AUROC as 'value [95 % interval]'.
--
-- The main estimators on the headline selection (test split, full answer spaces, all relations)
-- with their 95 % bootstrap intervals (clustered by relation): accuracy, ACE, Brier, AUROC. One row
-- per model, estimator and reduction; main = estimator_catalog.main: Base, Margin, Entropy, the
-- template marginal, the recalibrated ones and the MACE estimators (every estimator: kcal sql
-- --query estimators). Metric columns are picked by their role in metric_catalog and named after
-- the metric that plays it.
WITH overall AS (
    SELECT m.model_id, m.estimator, m.reduction, c.role, m.value, m.ci_low, m.ci_high, m.n
    FROM metrics AS m
    JOIN metric_catalog AS c ON c.name = m.metric
    JOIN estimator_catalog AS e ON e.name = m.estimator
    WHERE m.split = 'test' AND full_answer_space(m.answer_space_k) AND m.scope = 'all' AND e.main
      AND c.role IN ('correctness', 'calibration', 'proper_score', 'ranking')
)
SELECT model_id, estimator, reduction, max(n) AS instances,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE role = 'correctness'),
              max(ci_low) FILTER (WHERE role = 'correctness'),
              max(ci_high) FILTER (WHERE role = 'correctness')) AS accuracy,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE role = 'calibration'),
              max(ci_low) FILTER (WHERE role = 'calibration'),
              max(ci_high) FILTER (WHERE role = 'calibration')) AS ace,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE role = 'proper_score'),
              max(ci_low) FILTER (WHERE role = 'proper_score'),
              max(ci_high) FILTER (WHERE role = 'proper_score')) AS brier,
       printf('%.3f [%.3f, %.3f]', max(value) FILTER (WHERE role = 'ranking'),
              max(ci_low) FILTER (WHERE role = 'ranking'),
              max(ci_high) FILTER (WHERE role = 'ranking')) AS auroc
FROM overall
GROUP BY model_id, estimator, reduction
ORDER BY model_id, reduction, estimator;
