"""Import of a BEAR-format dataset into kcal's catalog and facts tables (`kcal dataset import-bear`).

A BEAR directory holds metadata_relations.json (relation id -> templates, answer_space_ids,
answer_space_labels) and one `<relation id>.jsonl` per relation (sub_id, sub_label, sub_aliases,
obj_id, obj_label, answer_idx per line). Everything is validated before anything is written, and
every error names the file, the line or relation, and the field.

The modules, each importing only those above it:
- parsed: what a read directory becomes (BearDataset of BearRelation), and BearFormatError;
- files: BEAR's JSON files read strictly (UTF-8 only, no key given twice);
- lite: the lite subset, BEAR's lines out of BEAR-big (bear_lite_indices.json);
- reading: a directory -> BearDataset (metadata, instance lines, answer spaces, dropped lines);
- tables: a BearDataset -> kcal's facts tables (kept facts and dropped lines, stored together);
- catalog: a BearDataset -> relations.toml entries, and the catalog.toml an import writes;
- templates_file: a templates file's paraphrases and markers in place of BEAR's templates;
- importing: import_bear, a directory into a store (home/datasets/bear).
"""
