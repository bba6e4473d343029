-- The metrics a paper would quote: the test split (dev only tunes thresholds and recalibration), each
-- instance's full answer space (full_answer_space, sql/views/_macros.sql; the `#k` subsamples are
-- the options-count study) and each estimator's headline reduction (headline_reductions), every scope and metric. The report
-- queries in sql/queries read it so that they all quote the same numbers.
-- Needs the metrics view (and headline_reductions, made from it and estimator_catalog).
CREATE OR REPLACE VIEW headline_metrics AS
SELECT m.*
FROM metrics AS m
JOIN headline_reductions AS r USING (model_id, estimator, reduction)
WHERE m.split = 'test' AND full_answer_space(m.answer_space_k);
