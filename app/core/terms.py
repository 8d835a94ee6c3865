"""Sparse term weights (BM25-style) for Chinese and English text.

Chinese runs are segmented with jieba (search-engine mode, over the compact dictionary of
`app.core.segmenter`); other text is lowercased, split into word
characters, stripped of stopwords and Snowball-stemmed (+0.02–0.03 R@10 on LoCoMo). A document
vector holds BM25's saturated term frequency; a query vector holds 1.0 per distinct term;
the index weighs a query's terms by their IDF (the embedded index among the user's memories,
`TermCounts` in `app/stores/qdrant_edge.py`; a Qdrant server by its IDF modifier), so
corpus statistics are never kept here.
Term ids are CRC32 hashes, stable across processes and releases.

A document may carry context (the turns before it): its terms count with a lower weight,
so a reply is found by the question it answers without outranking the question itself.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import jieba
import Stemmer

from app.core.segmenter import CompactTokenizer

jieba.setLogLevel(logging.WARNING)

# The one segmenter of the process (the part-of-speech tagger reuses it: `segmenter()`).
_JIEBA = CompactTokenizer()


@dataclass(frozen=True, slots=True)
class SparseVec:
    indices: list[int]
    values: list[float]


_CJK_RUN = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")
_WORD = re.compile(r"[^\W_]+")

# NLTK's English list (179 words), without the apostrophe forms: words split on them.
ENGLISH_STOPWORDS = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "ain",
        "aren",
        "couldn",
        "didn",
        "doesn",
        "hadn",
        "hasn",
        "haven",
        "isn",
        "ma",
        "mightn",
        "mustn",
        "needn",
        "shan",
        "shouldn",
        "wasn",
        "weren",
        "won",
        "wouldn",
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
        "以及",
        "这个",
        "那个",
        "这些",
        "那些",
        "什么",
        "怎么",
        "哪",
        # What the English list drops and a Chinese question shares with most turns:
        # pronouns (I, we, you, myself), question words (who, where, which, why, how, when),
        # have, to, the measure word "a". With 我 kept, "我的牙医叫什么？" matched a third
        # of its terms in every turn a user wrote (bench/HISTORY.md, "Chinese stopwords").
        "我",
        "你",
        "您",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "她们",
        "它们",
        "咱们",
        "咱",
        "自己",
        "谁",
        "哪里",
        "哪儿",
        "哪个",
        "哪些",
        "哪家",
        "为什么",
        "怎么样",
        "怎样",
        "如何",
        "多少",
        "几",
        "几个",
        "时候",
        "有",
        "到",
        "个",
    ]
)

BM25_K1 = 1.2
BM25_B = 0.75
# A fixed average document length keeps weights stable as the corpus grows (streaming).
BM25_AVG_LEN = 24.0


_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=4096)
def _segment(run: str) -> tuple[str, ...]:
    # Search-engine mode also yields the words inside compounds (北京烤鸭 → 北京, 烤鸭,
    # 北京烤鸭), so a query for a part finds the whole and the other way round.
    return tuple(w for w in _JIEBA.lcut_for_search(run) if w.strip() and w not in CHINESE_STOPWORDS)


def tokenize(text: str) -> list[str]:
    """Index terms of `text`: Chinese words, and stemmed lowercase words without stopwords."""
    terms: list[str] = []
    for k, part in enumerate(_CJK_RUN.split(text)):
        if not part:
            continue
        if k % 2:  # the split keeps CJK runs at odd positions
            terms.extend(_segment(part))
        else:
            words = [w for w in _WORD.findall(part.lower()) if w not in ENGLISH_STOPWORDS]
            terms.extend(_stemmer.stemWords(words))
    return terms


def term_id(term: str) -> int:
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


def document_vector(
    text: str,
    context: Sequence[str] = (),
    context_weight: float = 0.5,
    after: Sequence[str] = (),
    after_weight: float = 0.0,
) -> SparseVec:
    """BM25 term-frequency weights of `text`, plus its `context` (the turns before it) at
    `context_weight` and `after` (the turn after it) at `after_weight`."""
    tf: dict[int, float] = defaultdict(float)
    length = 0.0
    parts = [(text, 1.0), *((c, context_weight) for c in context)]
    if after_weight > 0:
        parts += [(a, after_weight) for a in after]
    for part, weight in parts:
        terms = tokenize(part)
        length += weight * len(terms)
        for t in terms:
            tf[term_id(t)] += weight
    if not tf:
        return SparseVec([], [])
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / BM25_AVG_LEN)
    indices = sorted(tf)
    return SparseVec(indices, [tf[i] * (BM25_K1 + 1) / (tf[i] + norm) for i in indices])


def query_vector(text: str) -> SparseVec:
    ids = sorted({term_id(t) for t in tokenize(text)})
    return SparseVec(ids, [1.0] * len(ids))


def segmenter() -> CompactTokenizer:
    """The process's Chinese segmenter, for jieba's part-of-speech tagger to cut with (its
    own default would load jieba's full dictionary beside this one)."""
    return _JIEBA


def warm_up() -> None:
    """Load the Chinese dictionary now (about half a second) rather than on the first
    request."""
    _JIEBA.initialize()
