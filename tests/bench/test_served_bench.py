"""bench/served.py runs end to end against tests/serving/server.py (the embedded SmolLM2 behind an
OpenAI-compatible server) and prints both engines side by side (no timing asserted)."""

import contextlib
import io

from bench import served
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from tests.serving.server import ReferenceServer
from tests.serving.test_served_engine import folder, model_cache  # noqa: F401 (fixture)


def test_the_bench_compares_the_engines_on_the_same_statements(folder):  # noqa: F811
    loaded = load_model(DEFAULT_MODEL, model_cache())
    out = io.StringIO()
    with ReferenceServer(loaded, "smol", root=folder) as server, contextlib.redirect_stdout(out):
        result = served.main(["--endpoint", server.url, "--instances", "3", "--questions", "2", "--samples",
                              "1", "--cache", str(model_cache())])  # fmt: skip
    text = out.getvalue()
    assert "torch (packed)" in text and "openai / torch throughput:" in text
    assert result["groups"] > 0 and result["agree"] == result["groups"]
    assert result["max_delta"] < 2e-3
    n = result["n"]
    assert result["requests_per_statement"] == -(-n // 32) / n  # 32 statements a request
    generated = result["generation"]
    assert "open answers: 2 questions" in text and generated["questions"] == 2
    assert generated["same_greedy"] == 2 and generated["max_delta"] < 1e-3
    assert generated["requests_per_question"] == 3 / 2  # one greedy request for both, one sampled each
