-- Each estimator minus Base on the same instances, with paired 95 % intervals.
--
-- Each estimator minus Base on the same test instances (headline selection, full answer spaces,
-- all relations) with a paired 95 % bootstrap interval: the same resamples for both, so an interval
-- that excludes 0 is a difference the data supports. `supported` says which.
SELECT model_id, reduction, estimator_a AS estimator, estimator_b AS minus, metric, n,
       round(difference, 4) AS difference, round(ci_low, 4) AS ci_low, round(ci_high, 4) AS ci_high,
       (ci_low > 0 OR ci_high < 0) AS supported
FROM metric_differences
WHERE split = 'test' AND full_answer_space(answer_space_k) AND scope = 'all'
ORDER BY model_id, reduction, estimator_a, metric;
