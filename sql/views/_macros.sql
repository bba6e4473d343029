-- The macros the views and the report queries use, created before the views (kcal_pipeline/core/
-- warehouse.py) in the store's DuckDB file, so the DuckDB CLI and any client have them too.
-- full_answer_space(k): whether answer_space_k = k is an instance's full answer space (0, as
-- dataset/instances/variants.py FULL_ANSWER_SPACE; k > 0 are the `#k<k>d<draw>` subsample copies of the
-- option-count sweep, read beside it and never pooled with it). The one place SQL spells it: every
-- view and query calls it instead of comparing answer_space_k with 0 (a test checks).
CREATE OR REPLACE MACRO full_answer_space(k) AS k = 0;
