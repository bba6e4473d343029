-- The reduction each estimator's headline numbers use (METHODS §1): the estimator catalog's
-- headline_reduction (its spec's first: 'sum', or for the MACE estimators 'answer_sum', the
-- answer's probability given the question), the one source this view and the Python code
-- (estimation/catalog.py headline_reduction) read. Where an estimator's rows lack it (a name the
-- catalog does not know), 'sum' (a spec's default) where it has it, else the first by name; tests
-- check the view and the Python rule agree. One row per model and estimator.
-- Needs the metrics and estimator_catalog views.
CREATE OR REPLACE VIEW headline_reductions AS
SELECT m.model_id, m.estimator,
       coalesce(min(m.reduction) FILTER (WHERE m.reduction = c.headline_reduction),
                min(m.reduction) FILTER (WHERE m.reduction = 'sum'),
                min(m.reduction)) AS reduction
FROM metrics AS m
LEFT JOIN estimator_catalog AS c ON c.name = m.estimator
GROUP BY m.model_id, m.estimator;
