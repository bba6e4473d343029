"""Engine "openai" against llama-cpp-python 0.3.36's own server (`make serving-llama-cpp`), which
echoes each prompt token's log-probability from the wrong position (` Paris` −8.21 where the model
gives −0.216) while its generated tokens are right: `kcal models add` refuses it, naming why, and
registers nothing. It takes text prompts only (token ids get HTTP 500), so kcal probes it in text."""

from __future__ import annotations

from tests.conftest import run_kcal
from tests.real_servers.conftest import NAME


def test_kcal_refuses_llama_cpp_pythons_server_before_scoring(llama_cpp_python, model_folder, tmp_path):
    home = tmp_path / "kcal"
    added = run_kcal(home, "models", "add", NAME, "--engine", "openai", "--endpoint", llama_cpp_python,
                     "--tokenizer", model_folder, "--start-token", "<|endoftext|>")  # fmt: skip
    print(added.stderr.strip())
    assert added.returncode == 2
    assert "this server's prompt log-probabilities disagree with its own generation" in added.stderr
    assert "it cannot score statements" in added.stderr
    assert NAME not in (home / "models.toml").read_text() if (home / "models.toml").exists() else True
