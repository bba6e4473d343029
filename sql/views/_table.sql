-- The default view of a kcal table: every partition of it. Hive partition columns (model,
-- relation) come from the path; {view} and {root} are filled in by kcal_pipeline/core/warehouse.py
-- ({root}: the table's absolute folder, glob characters escaped, as a quoted string literal; the
-- views are recreated when the store is opened somewhere else).
CREATE OR REPLACE VIEW {view} AS
SELECT * FROM read_parquet({root} || '/**/*.parquet', hive_partitioning = true, union_by_name = true);
