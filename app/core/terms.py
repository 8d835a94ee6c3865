"""Sparse term weights (BM25-style) for Chinese and English text.

Chinese runs are segmented with jieba; Latin text is lowercased and split on word
characters; stopwords go in both languages. A document vector holds BM25's saturated term
frequency; a query vector holds 1.0 per distinct term; Qdrant multiplies in the IDF
(`Modifier.IDF`), so corpus statistics never have to be kept here. Term ids are CRC32
hashes: stable across processes and releases, with negligible collisions at this size.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import jieba

jieba.setLogLevel(logging.WARNING)


@dataclass(frozen=True, slots=True)
class SparseVec:
    indices: list[int]
    values: list[float]


# Runs of CJK ideographs, or Latin/digit words (with inner apostrophes and hyphens).
_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[^\W_]+(?:['’-][^\W_]+)*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

ENGLISH_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "yeah",
        "yes",
        "oh",
        "ok",
        "okay",
        "wow",
        "hey",
        "hi",
        "really",
        "just",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
    ]
)
CHINESE_STOPWORDS = frozenset(
    [
        "的",
        "了",
        "和",
        "是",
        "就",
        "都",
        "而",
        "及",
        "与",
        "着",
        "或",
        "一个",
        "没有",
        "我们",
        "你们",
        "他们",
        "她们",
        "它们",
        "这",
        "那",
        "在",
        "也",
        "很",
        "吗",
        "呢",
        "吧",
        "啊",
        "呀",
        "哦",
        "嗯",
        "么",
        "之",
        "于",
        "把",
        "被",
        "让",
        "给",
        "对",
        "从",
        "向",
        "还",
        "又",
        "但",
        "却",
        "与其",
        "以及",
        "这个",
        "那个",
        "这些",
        "那些",
        "什么",
        "怎么",
        "哪",
        "个",
    ]
)

BM25_K1 = 1.2
BM25_B = 0.75
# A fixed average document length keeps weights stable as the corpus grows (streaming).
BM25_AVG_LEN = 24.0


@lru_cache(maxsize=4096)
def _segment(run: str) -> tuple[str, ...]:
    return tuple(w for w in jieba.lcut(run) if w.strip())


def tokenize(text: str) -> list[str]:
    """Index terms of `text`: Chinese words and lowercased Latin words, without stopwords."""
    terms: list[str] = []
    for match in _RUN.finditer(text):
        run = match.group(0)
        if _CJK.match(run):
            terms.extend(w for w in _segment(run) if w not in CHINESE_STOPWORDS)
        else:
            word = run.lower().replace("’", "'")
            if word.endswith("'s"):
                word = word[:-2]
            if word and word not in ENGLISH_STOPWORDS:
                terms.append(word)
    return terms


def term_id(term: str) -> int:
    return zlib.crc32(term.encode("utf-8"))


def document_vector(text: str) -> SparseVec:
    terms = tokenize(text)
    if not terms:
        return SparseVec([], [])
    counts = Counter(term_id(t) for t in terms)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * len(terms) / BM25_AVG_LEN)
    indices = sorted(counts)
    values = [counts[i] * (BM25_K1 + 1) / (counts[i] + norm) for i in indices]
    return SparseVec(indices, values)


def query_vector(text: str) -> SparseVec:
    ids = sorted({term_id(t) for t in tokenize(text)})
    return SparseVec(ids, [1.0] * len(ids))


def warm_up() -> None:
    """Load jieba's dictionary now (about a second) rather than on the first request."""
    jieba.initialize()
