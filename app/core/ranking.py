"""How recall ranks its candidates (pure, no I/O): rank fusion with a dense weight per
candidate, the penalties that put information before filler, and the change markers that
let a newer statement go above the older one it replaces.

Every rule and number here was measured on LoCoMo and the bilingual development set
(bench/README.md, "Recall trust"; `bench/experiments/recall_grid.py` reproduces them).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from app.core import terms

K = TypeVar("K", bound=Hashable)
Language = Literal["zh", "en", "mixed"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
# A statement that replaces an earlier one ("I changed the flight to …", 改成…).
_CHANGE = re.compile(
    r"改成|改到|改为|换成|换了|取消|不再|推迟|提前|搬到|退了|"
    r"\b(instead|changed?|cancel(?:l?ed)?|no longer|moved|switched|postponed|rescheduled|"
    r"stopped|quit|now)\b",
    re.IGNORECASE,
)


def language(text: str) -> Language:
    """'zh', 'en' or 'mixed', from the share of CJK characters among letters: about four
    Latin letters make a word, so `share = cjk / (cjk + latin / 4)`; zh above 0.8, en below
    0.2. Text with neither (numbers, emoji) counts as en."""
    cjk = len(_CJK.findall(text))
    latin = len(_LATIN.findall(text))
    if cjk + latin == 0:
        return "en"
    share = cjk / (cjk + latin / 4)
    return "zh" if share > 0.8 else "en" if share < 0.2 else "mixed"


def states_change(text: str) -> bool:
    """Does the text say something changed (改成, 取消, instead, no longer, moved …)?"""
    return _CHANGE.search(text) is not None


# --------------------------------------------------------------------------- fusion


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """Qdrant's weighted RRF, done here so the dense weight can depend on the candidate:
    a list of weight `w` adds `1 / (k − 1 + rank / w)` (rank from 1)."""

    k: int = 10
    sparse: float = 1.0
    dense_same: float = 0.3  # candidate in the query's language, or either mixed
    dense_cross: float = 2.0  # candidate in another language: only the encoder can match it

    def dense_for(self, query_language: Language, candidate_language: Language) -> float:
        if "mixed" in (query_language, candidate_language) or query_language == candidate_language:
            return self.dense_same
        return self.dense_cross

    def best(self) -> float:
        """The fused score of rank one in both lists at the base weights: the normaliser."""
        return 1.0 / (self.k - 1 + 1.0 / self.dense_same) + 1.0 / (self.k - 1 + 1.0 / self.sparse)


def fuse(dense: Sequence[tuple[K, float]], sparse: Sequence[K], w: FusionWeights) -> dict[K, float]:
    """Weighted RRF of two ranked lists: `dense` as (id, that candidate's dense weight),
    `sparse` as ids, both best first. Returns each id's fused score (unnormalised)."""
    fused: dict[K, float] = {}
    for rank, (key, weight) in enumerate(dense, 1):
        fused[key] = fused.get(key, 0.0) + 1.0 / (w.k - 1 + rank / weight)
    for rank, key in enumerate(sparse, 1):
        fused[key] = fused.get(key, 0.0) + 1.0 / (w.k - 1 + rank / w.sparse)
    return fused


# --------------------------------------------------------------------------- penalties


@dataclass(frozen=True, slots=True)
class Penalties:
    """Multiplicative penalties on the normalised fused score (each in [0, 1))."""

    context_only: float = 0.5  # matched through the turns before it, not its own text
    short: float = 0.2  # a turn of at most `short_terms` index terms ("OK, noted.")
    short_terms: int = 3
    asking_only: float = 0.5  # an assistant turn that only asks ("How do you like it?")
    asking_terms: int = 4


def own_match(cov_own: float, cov_chunk: float, cos_turn: float, cos_chunk: float) -> float:
    """How much of the match is the memory's own text, in [0, 1]: the larger of its share of
    the matched query terms and its own vector's cosine relative to the indexed one."""
    term_share = cov_own / cov_chunk if cov_chunk > 0 else 0.0
    vector_share = min(1.0, max(0.0, cos_turn / max(cos_chunk, 1e-9)))
    return min(1.0, max(term_share, vector_share))


def asks_only(role: str | None, text: str, max_terms: int = 4) -> bool:
    """An assistant turn that is a short question and states nothing."""
    t = text.strip()
    return role == "assistant" and t.endswith(("?", "？")) and len(terms.tokenize(t)) <= max_terms


def penalty_factor(own: float, index_terms: int, asking: bool, p: Penalties) -> float:
    """The product of the penalties that apply, in (0, 1]."""
    factor = 1.0 - p.context_only * (1.0 - min(1.0, max(0.0, own)))
    if index_terms <= p.short_terms:
        factor *= 1.0 - p.short
    if asking:
        factor *= 1.0 - p.asking_only
    return factor


# --------------------------------------------------------------------------- changes


@dataclass(frozen=True, slots=True)
class Statement:
    """What change promotion needs of a ranked result."""

    created_at: float  # epoch seconds
    changes: bool  # `states_change` of its text
    vector: NDArray[np.float32] | None  # its own (turn) vector, unit length


def promote_changes(items: Sequence[Statement], min_similarity: float = 0.4) -> list[int]:
    """A new order (indices into `items`, best first): each result that states a change
    moves just above the highest-ranked *older* result whose turn vector has a cosine of
    at least `min_similarity` with its own — the statement it most likely replaces."""
    order = list(range(len(items)))
    for i, item in enumerate(items):
        if not item.changes or item.vector is None:
            continue
        pos = order.index(i)
        for p in range(pos):
            other = items[order[p]]
            if (
                other.created_at < item.created_at
                and other.vector is not None
                and float(other.vector @ item.vector) >= min_similarity
            ):
                order.insert(p, order.pop(pos))
                break
    return order
