-- Accuracy, mean confidence and ACE per number of correct answers (n_gold), per estimator.
--
-- The MACE cardinality effect (Wang et al., METHODS §2, §5): with more correct answers a top-option
-- confidence should understate what the model knows. The `n_gold` scope of headline_metrics (test
-- split, full answer spaces, headline reduction) pools every relation's instances with that many
-- golds (a closed-set relation such as P37 has some with 2 or 3), probability-valued estimators
-- only; mean_confidence is the mean confidence over the same instances (headline_estimates joined
-- with probe_instances), so confidence minus accuracy reads as over- (> 0) or under-confidence (< 0).
-- Metric columns are picked by their role in metric_catalog (correctness, calibration, proper_score)
-- and named after the metric that plays it.
WITH confidence AS (
    SELECT h.model_id, h.estimator, h.reduction, CAST(p.n_gold AS VARCHAR) AS n_gold,
           avg(h.confidence) AS mean_confidence
    FROM headline_estimates AS h
    JOIN probe_instances AS p USING (relation_id, instance_id)
    WHERE h.output_kind = 'probability'
    GROUP BY ALL
)
SELECT m.model_id, m.estimator, m.reduction, CAST(m.scope_value AS INTEGER) AS n_gold,
       max(m.n) AS instances,
       round(max(m.value) FILTER (WHERE k.role = 'correctness'), 4)  AS accuracy,
       round(any_value(c.mean_confidence), 4)                        AS mean_confidence,
       round(max(m.value) FILTER (WHERE k.role = 'calibration'), 4)  AS ace,
       round(max(m.value) FILTER (WHERE k.role = 'proper_score'), 4) AS brier
FROM headline_metrics AS m
JOIN metric_catalog AS k ON k.name = m.metric
JOIN confidence AS c
  ON c.model_id = m.model_id AND c.estimator = m.estimator AND c.reduction = m.reduction
 AND c.n_gold = m.scope_value
WHERE m.scope = 'n_gold' AND k.role IN ('correctness', 'calibration', 'proper_score')
GROUP BY m.model_id, m.estimator, m.reduction, m.scope_value
ORDER BY m.model_id, m.estimator, n_gold;
