-- Per model, relation, estimator and reduction on the headline template: instances, accuracy,
-- and Brier (probability-valued estimators only; NULL for score-valued ones).
-- Equal to the `metrics` table (scope = 'relation'); the integration test checks that.
SELECT model_id, relation_id, estimator, reduction,
       count(*)                                        AS instances,
       avg(CAST(correct AS DOUBLE))                    AS accuracy,
       avg(power(confidence - CAST(correct AS DOUBLE), 2))
           FILTER (WHERE output_kind = 'probability')  AS brier
FROM headline_estimates
GROUP BY ALL
ORDER BY model_id, relation_id, estimator, reduction;
