-- Estimates on each relation's headline template (the curated one of rank 0; variants share
-- their parent's rank, so the kind matters): the
-- single-template figures of METHODS §2. Needs the estimates and templates views.
CREATE OR REPLACE VIEW headline_estimates AS
SELECT e.*
FROM estimates AS e
JOIN templates AS t USING (relation_id, template_id)
WHERE t.rank = 0 AND t.kind = 'curated';
