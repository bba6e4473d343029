-- ACE, accuracy and mean confidence per answer-space size k: the mean and spread over the draws.
--
-- The option-count sweep (Kissling et al. §5.4, Fig. 5; kcal demo --answer-space-k 5,10,20,30,60
-- --answer-space-draws 3): each instance with more than k options and fewer than k golds is cut to
-- k options (golds kept) once per draw, every draw its own seeded subsample, so a k counts only the
-- instances it cuts (instances: per draw). Per model, estimator (with its family from
-- estimator_status), headline reduction (headline_reductions) and k: over the draws, the mean and
-- the sample standard deviation (_sd; NULL with one draw) of ACE, accuracy and mean confidence,
-- all relations (scope 'all'), test split. answer_space 'full' (k NULL) is each instance's own
-- answer space, the sweep's reference. Probability-valued estimators with sweep rows only: empty
-- without the sweep. ACE, accuracy and mean confidence are the metrics of the roles calibration,
-- correctness and confidence_level in metric_catalog.
WITH rows AS (
    SELECT m.model_id, m.estimator, m.reduction, m.answer_space_k, m.answer_space_draw, c.role,
           m.value, m.n
    FROM metrics AS m
    JOIN headline_reductions AS r USING (model_id, estimator, reduction)
    JOIN metric_catalog AS c ON c.name = m.metric
    WHERE m.split = 'test' AND m.scope = 'all' AND c.role IN ('calibration', 'correctness', 'confidence_level')
),
swept AS (
    SELECT DISTINCT model_id, estimator
    FROM rows
    WHERE NOT full_answer_space(answer_space_k) AND role = 'calibration'
),
families AS (
    SELECT DISTINCT model_id, estimator, family FROM estimator_status
)
SELECT model_id, f.family, estimator, reduction,
       CASE WHEN full_answer_space(answer_space_k) THEN 'full'
            ELSE CAST(answer_space_k AS VARCHAR) END                                AS answer_space,
       CASE WHEN NOT full_answer_space(answer_space_k) THEN answer_space_k END      AS k,
       count(DISTINCT answer_space_draw)                                            AS draws,
       max(n)                                                                       AS instances,
       round(avg(value) FILTER (WHERE role = 'calibration'), 4)                AS ace,
       round(stddev_samp(value) FILTER (WHERE role = 'calibration'), 4)        AS ace_sd,
       round(avg(value) FILTER (WHERE role = 'correctness'), 4)                AS accuracy,
       round(stddev_samp(value) FILTER (WHERE role = 'correctness'), 4)        AS accuracy_sd,
       round(avg(value) FILTER (WHERE role = 'confidence_level'), 4)           AS mean_confidence,
       round(stddev_samp(value) FILTER (WHERE role = 'confidence_level'), 4)   AS mean_confidence_sd
FROM rows
JOIN swept USING (model_id, estimator)
LEFT JOIN families AS f USING (model_id, estimator)
GROUP BY model_id, f.family, estimator, reduction, answer_space_k
ORDER BY model_id, f.family, estimator, reduction, full_answer_space(answer_space_k), answer_space_k;
