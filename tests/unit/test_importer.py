"""`strata import`'s reading of files: the format told from the file, ids derived from a
line's place, batches within the ingest limits, and a checkpoint that applies only to the
file and target it was written for (app/importer.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.importer import (
    Checkpoint,
    ImportFileError,
    JsonLinesSource,
    Position,
    batches,
    open_source,
)


def _lines(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_format_is_told_from_the_file(tmp_path: Path) -> None:
    one = {"role": "user", "content": "hi"}
    assert open_source(_lines(tmp_path / "a.txt", [one, one]), "auto", None).format == "jsonl"
    strata = tmp_path / "export.json"
    strata.write_text(json.dumps({"format": 1, "user_id": "u", "sessions": []}, indent=2))
    assert open_source(strata, "auto", None).format == "strata"
    for doc in ([{"memory": "x"}], {"results": [{"memory": "x"}]}):
        mem0 = tmp_path / "mem0.json"
        mem0.write_text(json.dumps(doc))
        assert open_source(mem0, "auto", None).format == "mem0"


def test_lines_without_an_id_get_one_from_their_place(tmp_path: Path) -> None:
    rows = [{"role": "user", "content": "ok"}] * 3 + [
        {"id": "mine", "role": "user", "content": "x"}
    ]
    path = _lines(tmp_path / "h.jsonl", rows)
    first = [r.message.id for r in JsonLinesSource(path, "s").records(Position())]
    again = [r.message.id for r in JsonLinesSource(path, "s").records(Position())]
    assert first == again  # a re-run sends the same ids: the service counts duplicates
    assert len(set(first)) == 4  # the same content on another line is another message
    assert first[3] == "mine"


def test_a_bad_line_is_named(tmp_path: Path) -> None:
    path = _lines(
        tmp_path / "h.jsonl",
        [{"role": "user", "content": "ok"}, {"id": "seq:4", "role": "user", "content": "x"}],
    )
    with pytest.raises(ImportFileError, match=r"h\.jsonl:2: id: .*seq:"):
        list(JsonLinesSource(path, "s").records(Position()))


def test_batches_keep_to_one_session_and_the_limits(tmp_path: Path) -> None:
    rows = [{"session_id": "a", "role": "user", "content": "x" * 10}] * 7 + [
        {"session_id": "b", "role": "user", "content": "y" * 10}
    ] * 2
    source = JsonLinesSource(_lines(tmp_path / "h.jsonl", rows), "s")
    sizes = [
        (b.session_id, len(b.messages))
        for b in batches(source.records(Position()), max_messages=3, max_chars=25, max_bytes=10**6)
    ]
    assert sizes == [("a", 2), ("a", 2), ("a", 2), ("a", 1), ("b", 2)]  # 25 chars: 2 a batch
    ends = [
        b.end.records
        for b in batches(
            source.records(Position()), max_messages=3, max_chars=10**6, max_bytes=10**6
        )
    ]
    assert ends == [3, 6, 7, 9]


def test_a_checkpoint_applies_to_its_own_file_and_target(tmp_path: Path) -> None:
    rows = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    path = _lines(tmp_path / "h.jsonl", rows)
    source = JsonLinesSource(path, "s")
    records = list(source.records(Position()))
    mine = {"user": "u", "target": "http://a"}
    Checkpoint.beside(path, mine).save(source, records[3].end)

    assert Checkpoint.beside(path, mine).load(JsonLinesSource(path, "s")) == records[3].end
    assert Checkpoint.beside(path, {**mine, "user": "v"}).load(source) == Position()
    # The lines already sent changed: start over (the client ids make that harmless).
    _lines(path, [{"role": "user", "content": "changed"}, *rows[1:]])
    assert Checkpoint.beside(path, mine).load(JsonLinesSource(path, "s")) == Position()
