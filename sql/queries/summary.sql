-- Per model, relation and estimator on the headline template: instances, accuracy, Brier.
-- Equal to the `metrics` table (scope = 'relation'); the integration test checks that.
SELECT model_id, relation_id, estimator,
       count(*)                                        AS instances,
       avg(CAST(correct AS DOUBLE))                    AS accuracy,
       avg(power(confidence - CAST(correct AS DOUBLE), 2)) AS brier
FROM headline_estimates
GROUP BY ALL
ORDER BY model_id, relation_id, estimator;
