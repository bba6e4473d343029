-- Δaccuracy and ΔACE of each marked template vs its unmarked parent, per relation and overall.
--
-- A marker estimator (marker_certainly, marker_numeric_50, …) is Base on the marked variant of a
-- template, stored on the row of its unmarked parent (METHODS §2); templates.parent_id and
-- templates.variant name the pair. Per model and marker: the `template` scope rows of
-- headline_metrics (test split, full answer spaces, headline reduction; the curated templates) of the
-- marker against Base on the same parent template, then averaged over the relation's templates
-- that have the marker (relation_id = the relation) and over all relations weighted by their
-- instances (relation_id = 'all', as the metrics table's all_template_mean weighs them). A
-- parent without that marker (no place for a verbal marker in it) is left out of both sides.
-- delta = marked − unmarked: a negative delta_ace means the marker calibrates better. Base is
-- estimator_catalog's baseline; accuracy and ACE are the metrics of the roles correctness and
-- calibration in metric_catalog.
WITH markers AS (
    SELECT relation_id, parent_id, kind AS marker_kind,
           'marker_' || replace(variant, '-', '_') AS marker
    FROM templates
    WHERE kind IN ('marker_verbal', 'marker_numeric') AND parent_id IS NOT NULL
),
per_template AS (
    SELECT m.model_id, k.relation_id, k.marker_kind, m.estimator AS marker, m.reduction,
           m.scope_value AS template_id, m.n,
           max(m.value) FILTER (WHERE c.role = 'correctness') AS accuracy_marked,
           max(b.value) FILTER (WHERE c.role = 'correctness') AS accuracy_unmarked,
           max(m.value) FILTER (WHERE c.role = 'calibration') AS ace_marked,
           max(b.value) FILTER (WHERE c.role = 'calibration') AS ace_unmarked
    FROM headline_metrics AS m
    JOIN metric_catalog AS c ON c.name = m.metric
    JOIN markers AS k ON k.parent_id = m.scope_value AND k.marker = m.estimator
    JOIN headline_metrics AS b
      ON b.model_id = m.model_id AND b.reduction = m.reduction
     AND b.scope = 'template' AND b.scope_value = m.scope_value AND b.metric = m.metric
    JOIN estimator_catalog AS e ON e.name = b.estimator AND e.baseline
    WHERE m.scope = 'template' AND c.role IN ('correctness', 'calibration')
    GROUP BY ALL
),
per_relation AS (
    SELECT model_id, relation_id, marker_kind, marker, reduction, count(*) AS templates,
           max(n) AS instances,
           avg(accuracy_unmarked) AS accuracy_unmarked, avg(accuracy_marked) AS accuracy_marked,
           avg(ace_unmarked) AS ace_unmarked, avg(ace_marked) AS ace_marked
    FROM per_template
    GROUP BY ALL
),
overall AS (
    SELECT model_id, 'all' AS relation_id, marker_kind, marker, reduction,
           sum(templates) AS templates, sum(instances) AS instances,
           sum(accuracy_unmarked * instances) / sum(instances) AS accuracy_unmarked,
           sum(accuracy_marked * instances) / sum(instances) AS accuracy_marked,
           sum(ace_unmarked * instances) / sum(instances) AS ace_unmarked,
           sum(ace_marked * instances) / sum(instances) AS ace_marked
    FROM per_relation
    GROUP BY ALL
)
SELECT model_id, relation_id, marker_kind, marker, reduction, templates, instances,
       round(accuracy_unmarked, 4) AS accuracy_unmarked, round(accuracy_marked, 4) AS accuracy_marked,
       round(accuracy_marked - accuracy_unmarked, 4) AS delta_accuracy,
       round(ace_unmarked, 4) AS ace_unmarked, round(ace_marked, 4) AS ace_marked,
       round(ace_marked - ace_unmarked, 4) AS delta_ace
FROM (SELECT * FROM per_relation UNION ALL BY NAME SELECT * FROM overall)
ORDER BY model_id, marker_kind, marker, relation_id = 'all' DESC, relation_id;
