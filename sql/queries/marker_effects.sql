-- Epistemic markers (METHODS §2): each marker estimator is Base on the marked form of a template,
-- stored on the row of its unmarked parent; here set against Base on that parent. Headline
-- selection (test split, full answer spaces, headline template), over all relations:
-- Δaccuracy = marked − unmarked, ΔACE = marked − unmarked (negative: the marker calibrates better).
WITH m AS (
    SELECT model_id, estimator, reduction, metric, value, n
    FROM metrics
    WHERE split = 'test' AND answer_space_k = 0 AND scope = 'all' AND metric IN ('accuracy', 'ace')
)
SELECT marked.model_id, marked.estimator AS marker, marked.reduction,
       max(marked.n)                                                          AS instances,
       max(base.value) FILTER (WHERE base.metric = 'accuracy')                AS accuracy_unmarked,
       max(marked.value) FILTER (WHERE marked.metric = 'accuracy')            AS accuracy_marked,
       max(marked.value - base.value) FILTER (WHERE marked.metric = 'accuracy') AS delta_accuracy,
       max(base.value) FILTER (WHERE base.metric = 'ace')                     AS ace_unmarked,
       max(marked.value) FILTER (WHERE marked.metric = 'ace')                 AS ace_marked,
       max(marked.value - base.value) FILTER (WHERE marked.metric = 'ace')    AS delta_ace
FROM m AS marked
JOIN m AS base
  ON base.model_id = marked.model_id AND base.reduction = marked.reduction
 AND base.metric = marked.metric AND base.estimator = 'base'
WHERE marked.estimator LIKE 'marker\_%' ESCAPE '\'
GROUP BY ALL
ORDER BY marked.model_id, marked.estimator, marked.reduction;
