-- The estimates the headline numbers are computed on (METHODS §2-3): the test split (dev only
-- tunes thresholds and recalibration) on each instance's full answer space (the macro
-- full_answer_space, sql/views/_macros.sql; the `#k` subsample copies are read beside it, never
-- pooled with it); per-template estimators on each relation's headline template (the curated one
-- of rank 0; variants share their parent's rank, so the kind matters), plus every instance-grain
-- estimator (template_id null).
-- One row per instance, estimator and reduction: an estimator answers under each reduction it runs
-- under, and the report queries group by reduction (summary lists every one). For one answer per
-- instance and estimator, keep its headline reduction:
--   SELECT h.* FROM headline_estimates AS h JOIN headline_reductions USING (model_id, estimator, reduction)
-- The same selection as kcal_pipeline.estimation.registry.headline_estimates.
-- Needs the estimates and templates views.
CREATE OR REPLACE VIEW headline_estimates AS
SELECT e.*
FROM estimates AS e
JOIN templates AS t USING (relation_id, template_id)
WHERE t.rank = 0 AND t.kind = 'curated' AND e.split = 'test' AND full_answer_space(e.answer_space_k)
UNION ALL BY NAME
SELECT e.*
FROM estimates AS e
WHERE e.grain = 'instance' AND e.split = 'test' AND full_answer_space(e.answer_space_k);
