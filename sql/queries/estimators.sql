-- Every estimator under every reduction: accuracy, ACE, Brier and AUROC, with its family.
--
-- Every estimator that ran, side by side on the headline selection (test split, full answer
-- spaces, each relation's headline template or the instance-grain answer): instances, accuracy,
-- ACE (probability-valued estimators only; NULL for scores such as Gap or Token), Brier and
-- AUROC, with the family and output kind from estimator_status. One row per model, estimator
-- and reduction, over all relations (scope 'all'). Metric columns are picked by their role in
-- metric_catalog (correctness, calibration, proper_score, ranking) and named after its metric.
WITH headline AS (
    SELECT m.model_id, m.estimator, m.reduction, c.role, m.value, m.n
    FROM metrics AS m
    JOIN metric_catalog AS c ON c.name = m.metric
    WHERE m.split = 'test' AND full_answer_space(m.answer_space_k) AND m.scope = 'all'
),
kinds AS (
    SELECT DISTINCT s.model_id, s.estimator, s.family, e.output_kind
    FROM estimator_status AS s
    JOIN (SELECT DISTINCT estimator, output_kind FROM estimates) AS e USING (estimator)
)
SELECT h.model_id, k.family, h.estimator, h.reduction, k.output_kind,
       max(h.n)                                                AS instances,
       max(h.value) FILTER (WHERE h.role = 'correctness')  AS accuracy,
       max(h.value) FILTER (WHERE h.role = 'calibration')  AS ace,
       max(h.value) FILTER (WHERE h.role = 'proper_score') AS brier,
       max(h.value) FILTER (WHERE h.role = 'ranking')      AS auroc
FROM headline AS h
LEFT JOIN kinds AS k USING (model_id, estimator)
GROUP BY ALL
ORDER BY h.model_id, k.family, h.estimator, h.reduction;
