-- IoU_cons, DecCons and agreement per estimator × perturbed setup, and per estimator pair.
--
-- Zhao et al. (METHODS §4), from the consistency table: test split, thresholds tuned on dev, pooled
-- over relations. kind 'intra': the same estimator on the original prompt against a changed setup
-- (versus = setup_b: a marker such as 'certainly', 'extra-space', 'typo', 'context-fixed', 'paraphrase',
-- 'answer_space_k=3', …); kind 'cross': two estimators on the original prompt (versus = the second
-- one). Rows under the headline reduction of either estimator (headline_reductions: 'sum', or
-- 'answer_sum' for the MACE estimators), so each pair is read as its estimators are reported. A
-- setup drawn with several perturbation seeds gives the mean over its n_seeds seeds, and their
-- standard deviation in the *_std columns (NULL for a single draw). fallback: a dev-tuned
-- threshold was degenerate and fell back to 0.5 in either setup (in any seed).
WITH pairs AS (
    SELECT c.*
    FROM consistency AS c
    WHERE c.relation_id IS NULL AND c.seed IS NULL
      AND c.reduction IN (SELECT h.reduction FROM headline_reductions AS h
                          WHERE h.model_id = c.model_id AND h.estimator IN (c.estimator_a, c.estimator_b))
),
one AS (
    SELECT * FROM pairs WHERE statistic <> 'std'
),
per_seed AS (  -- a summary row over seeds has n NULL: show its draws' (largest) n
    SELECT model_id, kind, setup_a, setup_b, estimator_a, estimator_b, reduction, max(n) AS n
    FROM consistency
    WHERE relation_id IS NULL AND seed IS NOT NULL
    GROUP BY ALL
),
spread AS (
    SELECT model_id, kind, setup_a, setup_b, estimator_a, estimator_b, reduction,
           iou_cons AS iou_cons_std, dec_cons AS dec_cons_std, agreement AS agreement_std
    FROM pairs
    WHERE statistic = 'std' AND n_seeds > 1
)
SELECT o.model_id, o.kind, o.reduction, o.estimator_a AS estimator,
       CASE o.kind WHEN 'intra' THEN o.setup_b ELSE o.estimator_b END AS versus,
       coalesce(o.n_seeds, 1) AS n_seeds, coalesce(o.n, d.n) AS n,
       round(o.iou_acc, 4) AS iou_acc, round(o.iou_rej, 4) AS iou_rej,
       round(o.iou_cons, 4) AS iou_cons, round(s.iou_cons_std, 4) AS iou_cons_std,
       round(o.dec_cons, 4) AS dec_cons, round(s.dec_cons_std, 4) AS dec_cons_std,
       round(o.agreement, 4) AS agreement, round(s.agreement_std, 4) AS agreement_std,
       o.fallback_a OR o.fallback_b AS fallback
FROM one AS o
LEFT JOIN spread AS s
  ON s.model_id = o.model_id AND s.kind = o.kind AND s.setup_a = o.setup_a AND s.setup_b = o.setup_b
 AND s.estimator_a = o.estimator_a AND s.estimator_b = o.estimator_b AND s.reduction = o.reduction
LEFT JOIN per_seed AS d
  ON d.model_id = o.model_id AND d.kind = o.kind AND d.setup_a = o.setup_a AND d.setup_b = o.setup_b
 AND d.estimator_a = o.estimator_a AND d.estimator_b = o.estimator_b AND d.reduction = o.reduction
ORDER BY o.model_id, o.kind DESC, o.estimator_a, versus, o.reduction;
