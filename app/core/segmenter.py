"""jieba's segmentation over a compact dictionary: the same words, ~55 MiB less per process.

jieba holds its dictionary as one Python dict of 498,113 strings: the 349,045 words with
their counts and, at count 0, every prefix of every word, which its DAG scan needs to know
when to stop looking for a longer word. That dict and its strings take ~60 MiB of every
process that segments Chinese (bench/HISTORY.md, "jieba's dictionary in a trie"), and its
part-of-speech tagger reads a second dict of every word's tag (~40 MiB). Here the words
alone go into a MARISA trie (~1.2 MiB), their counts, log-counts and tags into arrays
indexed by the trie (~5 MiB): the words that start at a position are one common-prefix
search, so the prefixes need not be stored.

`CompactTokenizer` is a `jieba.Tokenizer` whose `get_DAG`, `calc` and `FREQ` answer from
the trie; every other step (the HMM for unknown words, search-engine mode, the
part-of-speech tagger that reuses `get_DAG` and `calc`) is jieba's own, so the words are
the same, tie-breaks included (`tests/unit/test_segmenter.py` compares both on Chinese
text). The dictionary is static: jieba's calls that change it (`add_word`, `del_word`,
`load_userdict`, `suggest_freq`) raise rather than change nothing.
"""

from __future__ import annotations

import array
import math
from typing import Any

import jieba
import marisa_trie


class WordCounts:
    """jieba's `FREQ` as its remaining callers read it (`get`, `in`, `[]`): a word's count.
    jieba's own also holds every proper prefix of a word at count 0, for its DAG scan
    alone, which `CompactTokenizer.get_DAG` replaces; every other reader (the HMM's unknown
    runs, search mode's n-grams, the tagger) asks only whether a count is non-zero."""

    __slots__ = ("_counts", "_trie")

    def __init__(self, trie: marisa_trie.Trie, counts: array.array[int]) -> None:
        self._trie = trie
        self._counts = counts

    def get(self, word: str, default: int | None = None) -> int | None:
        i = self._trie.get(word)
        return default if i is None else int(self._counts[i])

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word in self._trie

    def __getitem__(self, word: str) -> int:
        return int(self._counts[self._trie[word]])

    def __len__(self) -> int:
        return len(self._trie)


class WordTags:
    """jieba's `word_tag_tab` as its tagger reads it (`get(word, "x")`): one byte a word,
    indexed by the word's id in the trie."""

    __slots__ = ("_names", "_tagged", "_trie")

    def __init__(self, trie: marisa_trie.Trie, tagged: bytes, names: list[str]) -> None:
        self._trie = trie
        self._tagged = tagged
        self._names = names

    def get(self, word: str, default: str | None = None) -> str | None:
        i: int | None = self._trie.get(word)
        if i is None or not self._tagged[i]:
            return default
        return self._names[self._tagged[i] - 1]

    def __len__(self) -> int:
        return sum(1 for t in self._tagged if t)

    def update(self, _: object) -> None:  # jieba's user words: none (`CompactTokenizer`)
        raise NotImplementedError("the compact segmenter's dictionary cannot change")


class CompactTokenizer(jieba.Tokenizer):  # type: ignore[misc]  # jieba is untyped
    """jieba's default dictionary in a trie; `initialize` builds it (~0.6 s) once."""

    initialized: bool  # set by jieba's __init__, untyped there

    def initialize(self, dictionary: str | None = None) -> None:
        if dictionary:
            raise NotImplementedError("the compact segmenter reads jieba's own dictionary")
        if self.initialized:
            return
        with self.lock:
            if self.initialized:
                return
            counts: dict[str, int] = {}
            tags: dict[str, str] = {}
            total = 0
            with self.get_dict_file() as f:  # jieba's format: "word count tag" a line
                for line in f:
                    word, count, *tag = line.strip().decode("utf-8").split(" ")
                    counts[word] = int(count)  # a repeated word: the last entry, as jieba
                    total += int(count)
                    if tag:
                        tags[word] = tag[0]
            words = [w for w, c in counts.items() if c > 0]
            trie = marisa_trie.Trie(words)
            kept = array.array("I", bytes(4 * len(trie)))
            logs = array.array("d", bytes(8 * len(trie)))
            names = sorted(set(tags.values()))  # 55 in jieba 0.42's dictionary
            if len(names) > 255:
                raise ValueError(f"{len(names)} part-of-speech tags do not fit in a byte")
            code = {name: k + 1 for k, name in enumerate(names)}  # 0: no tag
            tagged = bytearray(len(trie))
            for word in words:
                i = trie.key_id(word)
                kept[i] = counts[word]
                logs[i] = math.log(counts[word])
                if word in tags:
                    tagged[i] = code[tags[word]]
            self._trie, self._logs = trie, logs
            self._tags = WordTags(trie, bytes(tagged), names)
            self._longest = max(map(len, words))
            self.FREQ = WordCounts(trie, kept)
            self.total = total
            self.initialized = True

    def word_tags(self) -> WordTags:
        """The part-of-speech tag of each dictionary word, as jieba's tagger reads its own
        `word_tag_tab` (a dict of every word, ~40 MiB): `rewrite._pos_tagger` gives it this."""
        self.check_initialized()
        return self._tags

    def get_DAG(self, sentence: str) -> dict[int, list[int]]:  # noqa: N802 - jieba's name
        """For each position, the last index of every dictionary word that starts there (or
        the position itself): jieba's DAG, from one prefix search a position."""
        self.check_initialized()
        prefixes = self._trie.prefixes
        longest = self._longest
        return {
            k: [k + len(w) - 1 for w in prefixes(sentence[k : k + longest])] or [k]
            for k in range(len(sentence))
        }

    def calc(self, sentence: str, DAG: dict[int, list[int]], route: dict[int, Any]) -> None:  # noqa: N803
        """jieba's best path, right to left: the same sums in the same order (a word not in
        the dictionary counts 1, log 0), ties to the longer word as its `max` over tuples."""
        n = len(sentence)
        route[n] = (0, 0)
        logtotal = math.log(self.total)
        find, logs = self._trie.get, self._logs
        for idx in range(n - 1, -1, -1):
            best: tuple[float, int] | None = None
            for x in DAG[idx]:
                i = find(sentence[idx : x + 1])
                step = ((logs[i] if i is not None else 0.0) - logtotal + route[x + 1][0], x)
                if best is None or step > best:
                    best = step
            route[idx] = best

    def _static(self, *_: Any, **__: Any) -> None:
        raise NotImplementedError("the compact segmenter's dictionary cannot change")

    add_word = del_word = load_userdict = suggest_freq = _static
