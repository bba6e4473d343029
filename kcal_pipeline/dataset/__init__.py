"""Stage 1, dataset construction: the relation catalog and templates, sources of facts, probe instances
and statements."""
