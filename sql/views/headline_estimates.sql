-- Estimates with one answer per instance and estimator (METHODS §2): per-template estimators on
-- each relation's headline template (the curated one of rank 0; variants share their parent's
-- rank, so the kind matters), plus every instance-grain estimator (template_id null).
-- Needs the estimates and templates views.
CREATE OR REPLACE VIEW headline_estimates AS
SELECT e.*
FROM estimates AS e
JOIN templates AS t USING (relation_id, template_id)
WHERE t.rank = 0 AND t.kind = 'curated'
UNION ALL BY NAME
SELECT e.*
FROM estimates AS e
WHERE e.grain = 'instance';
