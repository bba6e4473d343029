"""`kcal models list/add/sync/remove`: the model registry (KCAL_HOME/models.toml) and the
Dagster model partitions kept in step with it."""

from __future__ import annotations

import sys
from pathlib import Path

from assets.cli_common import print_table, writes
from kcal_pipeline.core.paths import kcal_home, registry_path
from kcal_pipeline.scoring.models import DTYPES, KINDS, ModelEntry, Registry
from kcal_pipeline.scoring.models.registry import ENGINES, ModelConfigError
from kcal_pipeline.scoring.served.client import host_of


def cmd_models_list(args) -> int:
    reg = Registry(registry_path(kcal_home(args.home)))
    rows = [
        (e.key, e.id, e.source, _engine(e), e.kind, e.dtype, e.device, e.batch_size, e.token_budget or "auto")
        for e in reg.entries()
    ]
    print_table(["key", "id", "source", "engine", "kind", "dtype", "device", "batch", "token budget"], rows)
    return 0


def _engine(entry: ModelEntry) -> str:
    """The engine, and for a served model the endpoint's host (never its path or a key)."""
    return f"{entry.engine} at {host_of(entry.endpoint)}" if entry.source == "server" else entry.engine


def sync_partitions(home: Path) -> None:
    from assets.instance import sync_model_partitions, sync_relation_partitions  # not the assets: fast

    keys = sync_model_partitions(home)
    print(f"model partitions in the Dagster instance: {', '.join(keys)}")
    relations = sync_relation_partitions(home)
    print(f"relation partitions (the probe): {', '.join(relations) or 'none yet (kcal demo --relation R)'}")


def cmd_models_add(args) -> int:
    home = kcal_home(args.home)
    if args.engine == "openai" or args.endpoint:
        if not args.endpoint:
            raise ModelConfigError(
                "engine 'openai' needs --endpoint URL (the server's API, like http://host:8000/v1)"
            )
        source = dict(
            source="server", endpoint=args.endpoint, api_key_env=args.api_key_env, tokenizer=args.tokenizer
        )
    elif args.api_key_env or args.tokenizer:
        given = "--api-key-env" if args.api_key_env else "--tokenizer"
        raise ModelConfigError(f"{given} applies to a served model only (--engine openai --endpoint URL)")
    elif args.path:
        source = dict(source="local", path=str(Path(args.path).resolve()))
    elif args.gguf_package:
        source = dict(source="gguf_package", package=args.gguf_package, file=args.file)
    elif args.gguf:
        source = dict(source="gguf_file", path=str(Path(args.gguf).resolve()))
    else:
        source = dict(source="hf", revision=args.revision)
    entry = ModelEntry(
        id=args.id,
        kind=args.kind,
        dtype=args.dtype,
        device=args.device,
        batch_size=args.batch_size,
        token_budget=args.token_budget,
        tf32=args.tf32,
        start_token=args.start_token,
        trust_remote_code=args.trust_remote_code,
        engine=args.engine,
        **source,
    )
    from kcal_pipeline.scoring.models.loading import check_loadable, load_served
    from kcal_pipeline.scoring.served.generation import served_abilities

    abilities: list[str] = []
    if entry.source == "server":  # refused here, not at scoring; what it can do is said
        loaded = load_served(entry)
        kind, abilities = loaded.kind, served_abilities(loaded)
    else:
        kind = check_loadable(entry)  # a path that holds no loadable model is refused, not registered
    from assets.instance import get_instance

    # The instance (and its tables) first: a store that cannot hold them refuses before models.toml
    # changes, so the same command runs again once the disk has room.
    get_instance(home)
    Registry(registry_path(home)).add(entry)
    detected = f" (kind {kind}{', detected' if entry.kind == 'auto' else ''})" if kind else ""
    print(f"registered {entry.id} as {entry.key}{detected}")
    for line in abilities:
        print(f"  {line}")
    if kind is None:
        print(
            f"note: {entry.id} is a Hugging Face hub id and was not checked: loading it needs network "
            "access to the hub (or its files in the local hub cache); offline, register a downloaded "
            "folder with --path DIR",
            file=sys.stderr,
        )
    sync_partitions(home)
    return 0


def cmd_models_sync(args) -> int:
    sync_partitions(kcal_home(args.home))
    return 0


def cmd_models_remove(args) -> int:
    home = kcal_home(args.home)
    Registry(registry_path(home)).remove(args.id)
    print(f"removed {args.id}")
    sync_partitions(home)
    return 0


def add_models_commands(sub) -> None:
    m = sub.add_parser("models", help="the model registry (KCAL_HOME/models.toml)")
    msub = m.add_subparsers(dest="models_command", required=True)
    msub.add_parser("list", help="list registered models").set_defaults(func=cmd_models_list)
    a = msub.add_parser("add", help="register a model and add its partition")
    a.add_argument("id", help="model id, e.g. a Hugging Face hub id")
    a.add_argument("--path", help="local directory with config, tokenizer and safetensors weights")
    a.add_argument("--gguf-package", help="Python package that ships a GGUF file")
    a.add_argument("--file", help="GGUF file name inside --gguf-package")
    a.add_argument("--gguf", help="a .gguf file (converted once to a safetensors cache)")
    a.add_argument("--revision", default="main", help="hub revision (commit, tag or branch)")
    a.add_argument(
        "--kind",
        default="auto",
        choices=KINDS,
        help="causal (clm) or masked (mlm) LM; auto detects it from the model's config when loaded",
    )
    a.add_argument("--dtype", default="float32", choices=DTYPES)
    a.add_argument("--device", default="auto")
    a.add_argument("--batch-size", type=int, default=32)
    a.add_argument(
        "--token-budget",
        type=int,
        help="token positions (rows × padded width) per causal-LM forward call; default: sized "
        "automatically (on a GPU from free memory, grown while throughput improves; on CPU batch size × 32)",
    )
    a.add_argument(
        "--no-tf32",
        dest="tf32",
        action="store_false",
        help="float32 models on GPUs: full float32 matmuls instead of TF32 (slower, ~1e-3 closer)",
    )
    a.add_argument("--start-token", help="token prepended to every statement (default: BOS, else EOS)")
    a.add_argument(
        "--engine",
        default="torch",
        choices=ENGINES,
        help="llama.cpp: score a GGUF source on its own quantized weights (faster on CPU, not float32 "
        "scores; needs `make llama-cpp`); openai: a model served elsewhere (vLLM, SGLang) through its "
        "completions API (--endpoint); default torch (float32 reference)",
    )
    a.add_argument(
        "--endpoint", help="engine openai: the server's API base URL, e.g. http://127.0.0.1:8000/v1"
    )
    a.add_argument(
        "--api-key-env",
        help="engine openai: the environment variable that holds the API key (the key is never stored)",
    )
    a.add_argument(
        "--tokenizer",
        help="engine openai: the served model's tokenizer (folder or hub id); default: the folder the "
        "server reports it loaded",
    )
    a.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model repository's own code (off by default)",
    )
    writes(a).set_defaults(func=cmd_models_add)
    msub.add_parser("sync", help="make the Dagster 'model' partitions match the registry").set_defaults(
        func=cmd_models_sync
    )
    r = msub.add_parser("remove", help="unregister a model")
    r.add_argument("id", help="model id or key")
    writes(r).set_defaults(func=cmd_models_remove)
