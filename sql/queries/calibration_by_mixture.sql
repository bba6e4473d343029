-- MACE mixtures {1} … {1,2,4,6}: accuracy, ACE and Brier per estimator, per domain and macro.
--
-- Wang et al.'s evaluation (METHODS §5): each mixture pools the MACE questions with those gold
-- counts. domain 'all' is the metrics table's `mixture` scope (the mean over MACE's domains, each
-- counting equally); the other rows are one MACE domain (= one relation: mace-award, …) from the
-- `mixture_domain` scope. headline_metrics (test split, full answer spaces, headline reduction),
-- probability-valued estimators (those with an ACE).
WITH mixtures AS (
    SELECT model_id, estimator, reduction, metric, value, n,
           CASE scope WHEN 'mixture' THEN scope_value ELSE split_part(scope_value, '|', 1) END AS mixture,
           CASE scope WHEN 'mixture' THEN 'all' ELSE split_part(scope_value, '|', 2) END AS domain
    FROM headline_metrics
    WHERE scope IN ('mixture', 'mixture_domain') AND metric IN ('accuracy', 'ace', 'brier')
)
SELECT model_id, estimator, reduction, '{' || mixture || '}' AS mixture, domain,
       max(n) AS instances,
       round(max(value) FILTER (WHERE metric = 'accuracy'), 4) AS accuracy,
       round(max(value) FILTER (WHERE metric = 'ace'), 4)      AS ace,
       round(max(value) FILTER (WHERE metric = 'brier'), 4)    AS brier
FROM mixtures
GROUP BY model_id, estimator, reduction, mixture, domain
HAVING count(*) FILTER (WHERE metric = 'ace') > 0
ORDER BY model_id, estimator, length(mixture), domain <> 'all', domain;
