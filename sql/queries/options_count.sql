-- Accuracy and ACE vs number of options: full answer spaces and k-option subsamples.
--
-- Kissling et al. §5.4 (METHODS §5): calibration changes with |O|. Rows are the `n_options` scope of
-- the metrics table (options = the instances' option count) and, with options NULL, all sizes
-- pooled (scope 'all'), for answer_space 'full' (each instance's own answer space: its relation's,
-- or a MACE question's golds and distractors) and 'subsample' (the option-count sweep's
-- `#k<k>d<draw>` copies, answer_space_k = k, one row per draw answer_space_draw: every gold plus
-- distractors up to k options; their mean and spread over the draws: options_sweep).
-- chance = 1 / options, the accuracy of a random guess with one gold. Test split, each estimator's
-- headline reduction (headline_reductions); probability-valued estimators only (those with an ACE).
-- accuracy and ACE are the metrics of the roles correctness and calibration in metric_catalog.
WITH rows AS (
    SELECT m.model_id, m.estimator, m.reduction, m.answer_space_k, m.answer_space_draw, c.role,
           m.value, m.n,
           CASE WHEN full_answer_space(m.answer_space_k) THEN 'full' ELSE 'subsample' END AS answer_space,
           CASE WHEN m.scope = 'n_options' THEN CAST(m.scope_value AS INTEGER) END AS options
    FROM metrics AS m
    JOIN headline_reductions AS r USING (model_id, estimator, reduction)
    JOIN metric_catalog AS c ON c.name = m.metric
    WHERE m.split = 'test' AND m.scope IN ('n_options', 'all') AND c.role IN ('correctness', 'calibration')
)
SELECT model_id, estimator, reduction, answer_space, answer_space_k, answer_space_draw, options,
       round(1.0 / options, 4) AS chance, max(n) AS instances,
       round(max(value) FILTER (WHERE role = 'correctness'), 4) AS accuracy,
       round(max(value) FILTER (WHERE role = 'calibration'), 4) AS ace
FROM rows
GROUP BY model_id, estimator, reduction, answer_space, answer_space_k, answer_space_draw, options
HAVING count(*) FILTER (WHERE role = 'calibration') > 0
ORDER BY model_id, estimator, answer_space_k, answer_space_draw, options NULLS LAST;
