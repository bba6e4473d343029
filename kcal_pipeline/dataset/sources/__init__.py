"""Where facts come from: the SPARQL client and cache, Wikidata queries, the embedded snapshot, BEAR files,
MACE queries."""
