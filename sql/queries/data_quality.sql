-- Per relation: facts kept and dropped, options per instance, duplicate and id-like labels.
--
-- The data_quality table (one row per relation and check: dataset/instances/quality.py) laid out
-- one row per relation, with the relation's label and domain. dropped_facts sums the facts every
-- filter dropped and drop_reasons names the non-zero ones; duplicate labels make two options
-- indistinguishable, an id-like label is no name at all, and an instance with fewer than two
-- options is no question: each should be 0. MACE relations also list their questions per gold
-- count and the candidate questions each question filter dropped (NULL for the others).
WITH q AS (
    SELECT relation_id, "check", value FROM data_quality
),
checks AS (
    SELECT relation_id,
           max(value) FILTER (WHERE "check" = 'facts')                           AS facts,
           max(value) FILTER (WHERE "check" = 'subjects')                        AS subjects,
           max(value) FILTER (WHERE "check" = 'objects')                         AS objects,
           sum(value) FILTER (WHERE "check" LIKE 'dropped:%')                    AS dropped_facts,
           string_agg(replace("check", 'dropped:', '') || ' ' || CAST(value AS BIGINT), ', '
                      ORDER BY "check") FILTER (WHERE "check" LIKE 'dropped:%' AND value > 0) AS drop_reasons,
           max(value) FILTER (WHERE "check" = 'instances')                       AS instances,
           max(value) FILTER (WHERE "check" = 'options_mean')                    AS options_mean,
           max(value) FILTER (WHERE "check" = 'options_min')                     AS options_min,
           max(value) FILTER (WHERE "check" = 'options_max')                     AS options_max,
           max(value) FILTER (WHERE "check" = 'instances_lt2_options')           AS instances_lt2_options,
           max(value) FILTER (WHERE "check" = 'duplicate_option_labels')         AS duplicate_option_labels,
           max(value) FILTER (WHERE "check" = 'instances_with_duplicate_labels') AS instances_with_duplicate_labels,
           max(value) FILTER (WHERE "check" = 'id_like_fact_labels')             AS id_like_fact_labels,
           max(value) FILTER (WHERE "check" = 'id_like_option_labels')           AS id_like_option_labels,
           string_agg(replace("check", 'questions_n_gold:', '') || ': ' || CAST(value AS BIGINT), ', '
                      ORDER BY TRY_CAST(replace("check", 'questions_n_gold:', '') AS INTEGER))
               FILTER (WHERE "check" LIKE 'questions\_n\_gold:%' ESCAPE '\')    AS questions_by_n_gold,
           string_agg(replace("check", 'dropped_questions:', '') || ' ' || CAST(value AS BIGINT), ', '
                      ORDER BY "check")
               FILTER (WHERE "check" LIKE 'dropped\_questions:%' ESCAPE '\' AND value > 0) AS dropped_questions
    FROM q
    GROUP BY relation_id
)
SELECT c.relation_id, r.label, r.domain,
       CAST(c.facts AS BIGINT) AS facts, CAST(c.subjects AS BIGINT) AS subjects,
       CAST(c.objects AS BIGINT) AS objects, CAST(c.dropped_facts AS BIGINT) AS dropped_facts,
       c.drop_reasons, CAST(c.instances AS BIGINT) AS instances, round(c.options_mean, 1) AS options_mean,
       CAST(c.options_min AS BIGINT) AS options_min, CAST(c.options_max AS BIGINT) AS options_max,
       CAST(c.instances_lt2_options AS BIGINT) AS instances_lt2_options,
       CAST(c.duplicate_option_labels AS BIGINT) AS duplicate_option_labels,
       CAST(c.instances_with_duplicate_labels AS BIGINT) AS instances_with_duplicate_labels,
       CAST(c.id_like_fact_labels AS BIGINT) AS id_like_fact_labels,
       CAST(c.id_like_option_labels AS BIGINT) AS id_like_option_labels,
       c.questions_by_n_gold, c.dropped_questions
FROM checks AS c
LEFT JOIN relations AS r USING (relation_id)
ORDER BY c.relation_id;
