"""A tiny, deterministic BERT masked LM with a really trained WordPiece tokenizer, saved to a directory.

No pretrained MLM is reachable offline, so the tests and the MLM benchmark build one: random
(seeded) weights are enough to check that scoring equals its definition, and a small trained
vocabulary makes many words split into several word pieces (the case within_word_l2r is about).
The initialiser range is large so that context visibly moves the predictions; with BERT's default
0.02 every log-probability is ≈ −log(vocab) and a wrong mask would change scores by less than the
test tolerances.

It lives in bench/, not tests/, because the benchmarks and the tests share it, and bench/ takes
nothing from tests/.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "The capital of France is Paris.",
    "The capital of Switzerland is Bern, and Zürich is its largest city.",
    "The capital of Côte d'Ivoire is Yamoussoukro, while Abidjan is its largest city.",
    "São Tomé is the capital of São Tomé and Príncipe.",
    "Reykjavík is the capital of Iceland.",
    "Asunción is the capital of Paraguay.",
    "Abu Dhabi is the capital of the United Arab Emirates.",
    "Sarajevo is the capital of Bosnia and Herzegovina.",
    "Marie Curie was born in Warsaw and worked in Paris.",
    "Ada Lovelace was born in London.",
    "The official language of Brazil is Portuguese.",
    "People in Québec speak French; people in Zürich speak German.",
    "The river Danube flows through Vienna, Budapest and Belgrade.",
    "Everyone who has studied geography knows that its capital city is called Bern.",
    "Glued names such as ZürichBern, ParisFrance or SãoToméIceland have pieces that start with capitals.",
    "More notes: ParisSão, BernZürich, FranceParis, IcelandReykjavík, QuébecAbu; all of them (sic)!",
]
VOCAB_SIZE = 200
# The trainer breaks ties between equally frequent pairs in hash order, so which pieces make the
# vocabulary changes from run to run. Tests never rely on how a word splits, except for these,
# which are added whole (WordPiece's longest match then keeps them whole).
WHOLE_WORDS = ("The", "the", "capital", "of", "is", "Paris", "Québec", "Zürich", "Bern", "Iceland")
SEED = 0


def build_tiny_mlm(folder: str | Path) -> Path:
    """Train the tokenizer, initialise the model and save both (safetensors) into folder."""
    import torch
    from tokenizers.implementations import BertWordPieceTokenizer
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    folder = Path(folder)
    trained = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trained.train_from_iterator(CORPUS, vocab_size=VOCAB_SIZE, min_frequency=1, show_progress=False)
    tokenizer = BertTokenizer(
        vocab=_sorted_vocab(trained.get_vocab()), do_lower_case=False, strip_accents=False
    )
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        initializer_range=0.3,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = BertForMaskedLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _sorted_vocab(trained: dict[str, int]) -> dict[str, int]:
    """Special tokens first, then the rest sorted, so ids do not depend on the trainer's hash order."""
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    rest = sorted((set(trained) | set(WHOLE_WORDS)) - set(special))
    return {token: i for i, token in enumerate(special + rest)}
