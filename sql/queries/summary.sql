-- Per model, relation and estimator: accuracy, acc_mean_t (mean over templates) and Brier.
--
-- The headline numbers per model, relation, estimator and reduction: test split, full answer
-- spaces. instances, accuracy and Brier (probability-valued estimators only; NULL for score-valued
-- ones) on the headline template, and acc_mean_t, the accuracy averaged over the relation's
-- curated templates (BEAR's way; NULL for instance-grain estimators).
-- Equal to the `metrics` table (split 'test', full_answer_space(answer_space_k), scopes
-- 'relation' and 'relation_template_mean'); the integration test checks that.
WITH per_template AS (
    SELECT e.model_id, e.relation_id, e.estimator, e.reduction, e.template_id,
           avg(CAST(e.correct AS DOUBLE)) AS accuracy
    FROM estimates AS e
    JOIN templates AS t USING (relation_id, template_id)
    WHERE t.kind = 'curated' AND e.split = 'test' AND full_answer_space(e.answer_space_k)
    GROUP BY ALL
),
template_mean AS (
    SELECT model_id, relation_id, estimator, reduction, avg(accuracy) AS acc_mean_t
    FROM per_template
    GROUP BY ALL
)
SELECT h.model_id, h.relation_id, h.split, h.estimator, h.reduction,
       count(*)                                          AS instances,
       avg(CAST(h.correct AS DOUBLE))                    AS accuracy,
       any_value(m.acc_mean_t)                           AS acc_mean_t,
       avg(power(h.confidence - CAST(h.correct AS DOUBLE), 2))
           FILTER (WHERE h.output_kind = 'probability')  AS brier
FROM headline_estimates AS h
LEFT JOIN template_mean AS m USING (model_id, relation_id, estimator, reduction)
GROUP BY h.model_id, h.relation_id, h.split, h.estimator, h.reduction
ORDER BY h.model_id, h.relation_id, h.estimator, h.reduction;
