-- Estimates on each relation's headline template (rank 0, the first curated one): the
-- single-template figures of METHODS §2. Needs the estimates and templates views.
CREATE OR REPLACE VIEW headline_estimates AS
SELECT e.*
FROM estimates AS e
JOIN templates AS t USING (relation_id, template_id)
WHERE t.rank = 0;
