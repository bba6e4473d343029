"""A raw-response cache in front of a SPARQL client, so re-materializing never re-asks the endpoint.

Each answer is one JSON file named by sha256(endpoint_id + "\\n" + query): the same query on another
endpoint is a different entry. The file keeps the endpoint, the query text and the retrieval time
beside the raw result, so provenance on a cache hit is exactly that of the original fetch.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kcal_pipeline.core.storage import write_text_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedResult:
    result: dict
    endpoint: str  # the stable endpoint id, not a per-run local URL
    query_hash: str  # sha256 of the query text alone, comparable across endpoints
    retrieved_at: str  # ISO-8601 UTC time of the original fetch
    from_cache: bool


def snapshot_endpoint_id(content_hash: str) -> str:
    """The embedded snapshot's id: its content, not the local port, which changes every run."""
    return f"embedded-snapshot:{content_hash[:12]}"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_sparql_result(value: object) -> bool:
    return isinstance(value, dict) and ("results" in value or "boolean" in value)


class CachedSparql:
    """`select` through a directory of cached raw responses; misses go to `client.select`."""

    def __init__(self, client, cache_dir: Path | str, endpoint_id: str) -> None:
        if not isinstance(endpoint_id, str) or not endpoint_id.strip():
            raise ValueError(f"endpoint_id must be a non-empty string, got {endpoint_id!r}")
        self.client = client
        self.cache_dir = Path(cache_dir)
        self.endpoint_id = endpoint_id

    def path_for(self, query: str) -> Path:
        key = sha256_hex(self.endpoint_id + "\n" + query)
        return self.cache_dir / key[:2] / f"{key}.json"

    def select(self, query: str) -> CachedResult:
        path = self.path_for(query)
        cached = self._read(path, query)
        if cached is not None:
            return cached
        result = self.client.select(query)
        retrieved_at = datetime.now(UTC).isoformat(timespec="seconds")
        record = {
            "endpoint": self.endpoint_id,
            "query": query,
            "retrieved_at": retrieved_at,
            "result": result,
        }
        write_text_atomic(path, json.dumps(record, ensure_ascii=False))
        return CachedResult(result, self.endpoint_id, sha256_hex(query), retrieved_at, False)

    def _read(self, path: Path, query: str) -> CachedResult | None:
        """The cached answer, or None on a miss; an unreadable entry is a logged miss, never a crash."""
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text("utf-8"))
            ok = (
                isinstance(record, dict)
                and record.get("endpoint") == self.endpoint_id
                and record.get("query") == query
                and isinstance(record.get("retrieved_at"), str)
                and _is_sparql_result(record.get("result"))
            )
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        else:
            why = "not a cache record for this endpoint and query"
        if not ok:
            log.warning("corrupt SPARQL cache file %s (%s): refetching and replacing it", path, why)
            return None
        return CachedResult(
            record["result"], self.endpoint_id, sha256_hex(query), record["retrieved_at"], True
        )
