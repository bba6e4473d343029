-- Per model: accuracy and the best-calibrated estimator (lowest ACE), with 95 % intervals.
--
-- One row per model, most accurate first. accuracy is Base's (the seed's estimator under 'sum') over
-- all relations on the headline selection (headline_metrics: test split, full answer spaces), with
-- its bootstrap interval (clustered by relation). best_calibrated is the probability-valued
-- estimator with the lowest ACE among those that answer every headline instance Base answers (n
-- equal to Base's, so none wins on a subset, e.g. one fitted only where a dev split exists); ties
-- go to the first name. Its ACE interval, Brier and AUROC follow, and base_ace to compare with.
-- ACE's bootstrap interval can lie above its point value (docs/methods.md, "Confidence intervals").
-- Base is estimator_catalog's baseline; accuracy, ACE, Brier and AUROC are the metrics that play
-- the roles correctness, calibration, proper_score and ranking in metric_catalog.
WITH overall AS (
    SELECT m.model_id, m.estimator, e.baseline, c.role, m.value, m.ci_low, m.ci_high, m.n
    FROM headline_metrics AS m
    JOIN metric_catalog AS c ON c.name = m.metric
    LEFT JOIN estimator_catalog AS e ON e.name = m.estimator
    WHERE m.scope = 'all'
),
base AS (
    SELECT model_id, n AS instances, value AS accuracy, ci_low AS accuracy_ci_low,
           ci_high AS accuracy_ci_high
    FROM overall
    WHERE baseline AND role = 'correctness'
),
base_ace AS (
    SELECT model_id, value AS base_ace FROM overall WHERE baseline AND role = 'calibration'
),
best AS (
    SELECT o.model_id, o.estimator, o.value AS ace, o.ci_low AS ace_ci_low, o.ci_high AS ace_ci_high
    FROM overall AS o
    JOIN base AS b ON b.model_id = o.model_id AND o.n = b.instances
    WHERE o.role = 'calibration' AND NOT isnan(o.value)
    QUALIFY row_number() OVER (PARTITION BY o.model_id ORDER BY o.value, o.estimator) = 1
)
SELECT b.model_id, b.instances,
       round(b.accuracy, 4) AS accuracy, round(b.accuracy_ci_low, 4) AS accuracy_ci_low,
       round(b.accuracy_ci_high, 4) AS accuracy_ci_high,
       best.estimator AS best_calibrated,
       round(best.ace, 4) AS ace, round(best.ace_ci_low, 4) AS ace_ci_low,
       round(best.ace_ci_high, 4) AS ace_ci_high,
       round(brier.value, 4) AS brier, round(auroc.value, 4) AS auroc,
       round(base_ace.base_ace, 4) AS base_ace
FROM base AS b
LEFT JOIN best USING (model_id)
LEFT JOIN base_ace USING (model_id)
LEFT JOIN overall AS brier
  ON brier.model_id = b.model_id AND brier.estimator = best.estimator AND brier.role = 'proper_score'
LEFT JOIN overall AS auroc
  ON auroc.model_id = b.model_id AND auroc.estimator = best.estimator AND auroc.role = 'ranking'
ORDER BY b.accuracy DESC, b.model_id;
