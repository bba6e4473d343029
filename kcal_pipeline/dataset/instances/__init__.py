"""From facts to probes: answer spaces, sampling, template variants and paraphrases, instances, statements,
quality; MACE questions."""
