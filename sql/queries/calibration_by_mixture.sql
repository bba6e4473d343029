-- MACE mixtures {1} … {1,2,4,6}: accuracy, ACE and Brier per estimator, per domain and macro.
--
-- Wang et al.'s evaluation (METHODS §5): each mixture pools the MACE questions with those gold
-- counts. domain 'all' is the metrics table's `mixture` scope (the mean over MACE's domains, each
-- counting equally); the other rows are one MACE domain (= one relation: mace-award, …) from the
-- `mixture_domain` scope. headline_metrics (test split, full answer spaces, headline reduction),
-- probability-valued estimators (those with an ACE). Metric columns are picked by their role in
-- metric_catalog (correctness, calibration, proper_score) and named after the metric that plays it.
WITH mixtures AS (
    SELECT m.model_id, m.estimator, m.reduction, k.role, m.value, m.n,
           CASE m.scope WHEN 'mixture' THEN m.scope_value ELSE split_part(m.scope_value, '|', 1) END AS mixture,
           CASE m.scope WHEN 'mixture' THEN 'all' ELSE split_part(m.scope_value, '|', 2) END AS domain
    FROM headline_metrics AS m
    JOIN metric_catalog AS k ON k.name = m.metric
    WHERE m.scope IN ('mixture', 'mixture_domain') AND k.role IN ('correctness', 'calibration', 'proper_score')
)
SELECT model_id, estimator, reduction, '{' || mixture || '}' AS mixture, domain,
       max(n) AS instances,
       round(max(value) FILTER (WHERE role = 'correctness'), 4)  AS accuracy,
       round(max(value) FILTER (WHERE role = 'calibration'), 4)  AS ace,
       round(max(value) FILTER (WHERE role = 'proper_score'), 4) AS brier
FROM mixtures
GROUP BY model_id, estimator, reduction, mixture, domain
HAVING count(*) FILTER (WHERE role = 'calibration') > 0
ORDER BY model_id, estimator, length(mixture), domain <> 'all', domain;
