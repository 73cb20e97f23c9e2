"""Publishing a set of files: staged whole, then renamed into place; a crash is repaired."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import basketgnn.io_utils as io_utils
from basketgnn.io_utils import PUBLISH_STAGING, finish_publishing, publish_files


def make_files(folder: Path, contents: dict[str, str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in contents.items():
        (folder / name).write_text(text)
    return [folder / name for name in contents]


def texts(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir()) if p.is_file()}


def test_publish_replaces_changed_files_keeps_identical_ones_and_removes_stale(tmp_path):
    dest = tmp_path / "dest"
    make_files(dest, {"a.txt": "old a", "b.txt": "same", "chart_old.png": "gone"})
    os.utime(dest / "b.txt", ns=(0, 0))
    new = make_files(tmp_path / "src", {"a.txt": "new a", "b.txt": "same", "c.txt": "new c"})
    changed = publish_files(dest, new, remove=["chart_old.png", "c.txt", "never_there.png"])
    assert changed == ["a.txt", "c.txt"]
    assert texts(dest) == {"a.txt": "new a", "b.txt": "same", "c.txt": "new c"}
    assert (dest / "b.txt").stat().st_mtime_ns == 0  # identical: not rewritten
    assert not (dest / PUBLISH_STAGING).exists()


def test_a_crash_while_staging_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    dest = tmp_path / "dest"
    make_files(dest, {"a.txt": "old a", "b.txt": "old b", "stale.png": "old"})
    new = make_files(tmp_path / "src", {"a.txt": "new a", "b.txt": "new b"})
    real_place = io_utils._link_or_copy

    def fail_on_b(src, dst):
        if Path(src).name == "b.txt":
            raise OSError("disk full")
        return real_place(src, dst)

    monkeypatch.setattr(io_utils, "_link_or_copy", fail_on_b)
    with pytest.raises(OSError, match="disk full"):
        publish_files(dest, new, remove=["stale.png"])
    assert texts(dest) == {"a.txt": "old a", "b.txt": "old b", "stale.png": "old"}
    assert not (dest / PUBLISH_STAGING).exists()


def test_a_crash_among_the_renames_is_completed_by_finish_publishing(tmp_path, monkeypatch):
    dest = tmp_path / "dest"
    make_files(dest, {"a.txt": "old a", "b.txt": "old b", "c.txt": "old c", "stale.png": "x"})
    new = make_files(tmp_path / "src", {"a.txt": "new a", "b.txt": "new b", "c.txt": "new c"})
    real_replace = os.replace

    def killed_at_b(src, dst):
        if Path(src).name == "b.txt":
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(io_utils.os, "replace", killed_at_b)
    with pytest.raises(KeyboardInterrupt):
        publish_files(dest, new, remove=["stale.png"])
    monkeypatch.undo()
    assert texts(dest)["a.txt"] == "new a" and texts(dest)["b.txt"] == "old b"  # mixed, for now

    assert finish_publishing(dest) is True
    assert texts(dest) == {"a.txt": "new a", "b.txt": "new b", "c.txt": "new c"}
    assert not (dest / PUBLISH_STAGING).exists()
    assert finish_publishing(dest) is False  # nothing left to do


def test_an_incomplete_staging_is_discarded_without_touching_the_folder(tmp_path):
    dest = tmp_path / "dest"
    make_files(dest, {"a.txt": "old a"})
    make_files(dest / PUBLISH_STAGING, {"a.txt": "half of a new"})  # no manifest: not complete
    assert finish_publishing(dest) is False
    assert texts(dest) == {"a.txt": "old a"}
    assert not (dest / PUBLISH_STAGING).exists()


def test_two_files_of_one_name_cannot_be_published_together(tmp_path):
    one = make_files(tmp_path / "x", {"a.txt": "1"})
    two = make_files(tmp_path / "y", {"a.txt": "2"})
    with pytest.raises(ValueError, match="a.txt"):
        publish_files(tmp_path / "dest", one + two)


def test_published_files_are_hard_links_on_one_filesystem(tmp_path):
    """A file on the destination's filesystem is linked, not copied: no second copy of a
    night's recommendations on the disk; the source is left as it was."""
    new = make_files(tmp_path / "src", {"a.txt": "new a"})
    publish_files(tmp_path / "dest", new)
    assert (tmp_path / "dest" / "a.txt").stat().st_ino == new[0].stat().st_ino
    assert new[0].read_text() == "new a" and new[0].stat().st_nlink == 2


def test_files_are_copied_where_a_link_is_refused(tmp_path, monkeypatch):
    """Another filesystem (os.link raises EXDEV) or one without hard links: a copy."""
    new = make_files(tmp_path / "src", {"a.txt": "new a", "b.txt": "new b"})

    def cross_device(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(io_utils.os, "link", cross_device)
    publish_files(tmp_path / "dest", new)
    assert texts(tmp_path / "dest") == {"a.txt": "new a", "b.txt": "new b"}
    assert (tmp_path / "dest" / "a.txt").stat().st_ino != new[0].stat().st_ino


def test_streamed_parquet_dictionary_encodes_ids_and_ranks_but_not_scores(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from basketgnn.workflow.recommendations import SCHEMA

    rng = np.random.default_rng(0)
    n = 5000
    table = pa.table(
        {
            "customer_id": pa.array([f"C{i // 20:05d}" for i in range(n)]),
            "item_id": pa.array([f"P{i:04d}" for i in rng.integers(0, 300, n)]),
            "rank": pa.array(np.tile(np.arange(1, 21, dtype=np.int32), n // 20)),
            "score": pa.array(rng.random(n).astype(np.float32)),
        },
        schema=SCHEMA,
    )
    path = tmp_path / "recs.parquet"
    assert io_utils.write_table_stream(path, [table, table.slice(0, 100)], SCHEMA) == n + 100
    assert io_utils.dictionary_columns(SCHEMA) == ["customer_id", "item_id", "rank"]
    meta = pq.ParquetFile(path).metadata
    for g in range(meta.num_row_groups):
        encodings = {meta.schema.column(c).name: meta.row_group(g).column(c).encodings for c in range(4)}
        for name in ("customer_id", "item_id", "rank"):
            assert "RLE_DICTIONARY" in encodings[name], (name, encodings[name])
        assert not any("DICTIONARY" in e for e in encodings["score"]), encodings["score"]
    back = pq.read_table(path)
    assert back.schema.equals(SCHEMA) and back.equals(pa.concat_tables([table, table.slice(0, 100)]))
