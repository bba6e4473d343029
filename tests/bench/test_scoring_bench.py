"""bench/scoring.py's config mode (the GPU bench) on the CPU: the shipped configs have the public
shapes, and a tiny random model runs every kcal path end to end against the fp32 reference (no
timing asserted: the bench prints those)."""

import contextlib
import io
import warnings

import polars as pl
import pytest

from bench import scoring as bench

# name: (hidden, layers, heads, kv heads, intermediate, vocab, tied, rope theta)
SHAPES = {
    "tiny": (64, 2, 4, 2, 128, 49152, True, 10_000.0),
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152, True, 100_000.0),
    "smollm2-1.7b": (2048, 24, 32, 32, 8192, 49152, True, 130_000.0),
    "llama-8b": (4096, 32, 32, 8, 14336, 128256, False, 500_000.0),
}


def rope_theta(config) -> float:
    """transformers 5 moves rope_theta into rope_parameters; 4.x keeps it on the config."""
    return float((getattr(config, "rope_parameters", None) or {}).get("rope_theta") or config.rope_theta)


@pytest.mark.parametrize("name", SHAPES)
def test_shipped_configs_have_the_public_shapes(name):
    config = bench.load_config(name)
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.intermediate_size,
        config.vocab_size,
        config.tie_word_embeddings,
        rope_theta(config),
    ) == SHAPES[name]
    assert config.model_type == "llama"
    assert config.vocab_size >= 49152  # the embedded tokenizer's ids are all below 49152


def test_parameter_counts_from_the_configs_arithmetic():
    assert sorted(p.stem for p in bench.CONFIGS.glob("*.json")) == sorted(SHAPES)
    params = {name: bench.config_params(bench.load_config(name)) for name in SHAPES}
    assert abs(params["llama-8b"] / 1e9 - 8.0) <= 0.1  # Llama-3-8B: 8.03 B
    assert round(params["smollm2-135m"] / 1e6, 1) == 134.5  # as the embedded SmolLM2-135M loads
    assert abs(params["smollm2-1.7b"] / 1e9 - 1.71) <= 0.01
    assert params["tiny"] == sum(
        p.numel() for p in bench.random_model(bench.load_config("tiny"), "cpu", 0).parameters()
    )


@pytest.fixture(scope="module")
def statements(tmp_path_factory):
    """5 whole (instance, template) groups of the bench's statements (every template, 5
    instances), as the parquet file --statements reads."""
    folder = tmp_path_factory.mktemp("bench-statements")
    frame = bench.build_statements(6, folder)
    rows = [r for group in bench.groups_of(frame)[::6] for r in group[3]]
    path = folder / "statements.parquet"
    frame.select(pl.all().gather(rows)).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def tiny_run(statements):
    """`bench/scoring.py --config tiny` on the CPU in bfloat16 then float32 (the GPU default's
    order: the float32 model outlives its converted copy), one round, no peers."""
    argv = ["--config", "tiny", "--device", "cpu", "--dtypes", "bfloat16,float32"]
    argv += ["--statements", str(statements), "--rounds", "1", "--no-peers"]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(), contextlib.redirect_stdout(out):
        mp.setenv("TQDM_DISABLE", "1")
        runs = bench.main(argv)
    return runs, out.getvalue()


def test_config_mode_runs_every_kcal_path_and_matches_the_fp32_reference(tiny_run, statements):
    runs, _ = tiny_run
    n = pl.read_parquet(statements).height
    assert [run.dtype for run in runs] == ["bfloat16", "float32"]
    bf16, fp32 = runs
    kcal = ["kcal packed", "kcal packed b32", "kcal plain", "kcal plain b32"]
    for run in runs:
        assert [r.name for r in run.results] == kcal  # --no-peers
        for r in run.results:
            assert r.ok, r.error
            assert r.n == n and r.seconds > 0 and r.positions > 0 and r.n / r.seconds > 0
        assert run.peak > 0
    # The built model has the parameters the config's arithmetic gives (tied: 2 × all of them).
    assert fp32.per_position == 2 * bench.config_params(bench.load_config("tiny"))
    for name, (d_max, _, differ) in fp32.deltas.items():
        assert differ == 0 and d_max <= 1e-4, (name, d_max)  # float32 against the fp32 reference
    for name, (d_max, d_mean, differ) in bf16.deltas.items():
        # bfloat16 rounding, but the same weights: random ones of another seed differ by nats.
        assert differ == 0 and 1e-4 < d_max <= 1.0 and d_mean <= 0.1, (name, d_max, d_mean)


def test_config_mode_prints_the_tables_and_decisions(tiny_run):
    _, printed = tiny_run
    assert "config tiny" in printed and "3.2 M parameters (3.2 M by the config's arithmetic)" in printed
    assert "fp32 reference: kcal plain" in printed and "TF32 off" in printed
    assert "lm-pub-quiz, minicons: skipped (--no-peers)" in printed
    for dtype in ("float32", "bfloat16"):
        assert f"== {dtype} on cpu: random-tiny" in printed
        assert f"% of {dtype} peak (best round)" in printed
    assert printed.count("kcal packing decision: ") == 2
    assert printed.count("kcal token budgets: ") == 2
    assert "bfloat16 stmt/s" in printed and "float32 stmt/s" in printed  # the dtypes side by side


def test_options_of_config_mode_are_refused_without_a_config():
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        bench.parse_args(["--no-peers"])
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        bench.parse_args(["--config", "no-such-config"])
