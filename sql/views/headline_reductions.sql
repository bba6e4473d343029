-- The reduction each estimator's headline numbers use (METHODS §1): 'sum', the default, wherever
-- the estimator runs under it, else the one it runs under (the MACE estimators: 'answer_sum', the
-- answer's probability given the question). The same choice as the report's (its spec's first
-- reduction); a test checks the two agree. One row per model and estimator.
-- Needs the metrics view.
CREATE OR REPLACE VIEW headline_reductions AS
SELECT model_id, estimator,
       coalesce(min(reduction) FILTER (WHERE reduction = 'sum'), min(reduction)) AS reduction
FROM metrics
GROUP BY model_id, estimator;
