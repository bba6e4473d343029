-- The data-quality table, one row per relation and one column per check.
PIVOT data_quality ON "check" USING first(value) GROUP BY relation_id ORDER BY relation_id;
