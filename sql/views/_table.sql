-- The default view of a kcal table: every partition of it. Hive partition columns (model,
-- relation) come from the path; {view} and {root} are filled in by kcal_pipeline/core/warehouse.py
-- ({root} as an escaped string literal).
CREATE OR REPLACE VIEW {view} AS
SELECT * FROM read_parquet({root} || '/**/*.parquet', hive_partitioning = true, union_by_name = true);
