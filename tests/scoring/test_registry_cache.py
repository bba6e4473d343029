"""Registry.load keeps its parse while models.toml is unchanged (the runner asks once per
partition: parsing every time grew with models²) and re-reads it after any change."""

import os

from kcal_pipeline.scoring.models import ModelEntry, Registry
from kcal_pipeline.scoring.models import registry as registry_module


def test_the_parse_is_reused_until_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "models.toml"
    registry = Registry(path)
    registry.add(ModelEntry(id="org/a", source="local", path="/m/a", kind="clm"))
    parses = []
    real = Registry._parse
    monkeypatch.setattr(Registry, "_parse", lambda self: parses.append(1) or real(self))
    first = Registry(path).load()
    assert Registry(path).load() == first and len(parses) == 1  # a second Registry object: no re-parse
    first.clear()  # a caller's copy: the cache keeps its own
    assert "org/a" in Registry(path).load()
    registry.add(ModelEntry(id="org/b", source="local", path="/m/b", kind="mlm"))  # replaces the file
    assert "org/b" in Registry(path).load() and len(parses) == 2
    # an edit in place (same inode) that changes the size or the mtime is seen too
    text = path.read_text().replace('"/m/b"', '"/m/bb"')
    path.write_text(text)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert Registry(path).get("org/b").path == "/m/bb" and len(parses) == 3
    assert registry_module._PARSED[path.resolve()][1]["org/b"].path == "/m/bb"
