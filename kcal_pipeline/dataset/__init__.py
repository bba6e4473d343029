"""Dataset construction, for the dataset, facts, probe and paraphrases stages: the relation catalog
and templates, sources of facts, probe instances and statements."""
