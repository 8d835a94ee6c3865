"""The calibrated relevance that recall reports as `scores.semantic` (pure, no I/O).

`relevance = σ(z + SHIFT)`, `z` a logistic regression of "this memory is evidence for the
query" over four features of a candidate, all in [0, 1] or cosines:

- `cos_turn`: the query's cosine with the turn's own vector (the `turn` named vector),
- `cos_chunk`: with the indexed vector (the turn blended with the turns before it),
- `cov_own`: the share of the query's distinct terms found in the memory's own text,
- `cov_chunk`: the share found in its indexed terms (own text plus its sparse context).

The shares are unweighted (no per-user IDF: Qdrant applies that inside the index, and
keeping per-user document frequencies beside it was not worth it; measured in
bench/HISTORY.md, "Recall trust"). The coefficients were fitted on LoCoMo conversations 0–2
(495 questions, each over its 50 fused candidates) by
`bench/experiments/recall_grid.py --locomo PATH` (it prints "plain-coverage calibration
logit" and writes `calibration.weights_plain` to its JSON): refit whenever the encoder, the
chunking or the sparse weights change. P(evidence) is tiny by construction (1–2 evidence
turns among ~600), so the reported scale shifts the log-odds by `SHIFT`: 0.5 is where the
fitted P is ≈ 0.0018.

A Chinese query over an English memory, or the reverse, is first put on the same-language
scale (`CrossLanguage`, fitted on a bilingual set of its own): English LoCoMo alone would
read its missing shared terms as "no match".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

_F = TypeVar("_F", float, NDArray[np.float64])


@dataclass(frozen=True, slots=True)
class CrossLanguage:
    """Puts a cross-language pair (a Chinese query and an English memory, or the reverse) on
    the scale of a same-language pair, on the log-odds before `shift`:

        z ↦ scale · z + turn · cos_turn + short · [≤ 3 index terms] + asks · [only asks]
            + lacks · [a when/where question, and the memory names no time/place] + offset

    Such a pair shares few or no terms (a name, a number), and the coverage terms of the
    calibration read that as "no lexical match". What is left is the encoder, whose cosine with the
    turn's own text (not its blended context) tells evidence from its neighbours, and the
    shape of the turn: the encoder likes short generic turns ("How do you like it?") as
    much as facts. The flags are `app.core.ranking`'s filler and answer-type tests; no
    cross-language evidence of the fitting set has one, so their weights come from a
    standard normal prior as much as from the data. Fitted on a bilingual set held apart
    from the development set (`bench/experiments/cross_language_fit.py`): a logistic fit
    gives the weights' proportions, and the level is then set so that the candidates that
    are not evidence have the same upper quantiles in both kinds of pair. The likelihood
    alone left that level loose and put unrelated cross-language pairs above
    `DEFAULT_MIN_RELEVANCE` twice as often as same-language ones."""

    scale: float
    turn: float
    short: float
    asks: float
    lacks: float
    offset: float

    def apply(self, z: _F, cos_turn: _F, short: _F, asks: _F, lacks: _F) -> _F:
        """The map, on floats or elementwise on arrays (flags as 0/1)."""
        out: _F = (
            self.scale * z
            + self.turn * cos_turn
            + self.short * short
            + self.asks * asks
            + self.lacks * lacks
            + self.offset
        )
        return out


@dataclass(frozen=True, slots=True)
class Calibration:
    cos_turn: float
    cos_chunk: float
    cov_own: float
    cov_chunk: float
    bias: float
    shift: float
    cross: CrossLanguage | None = None

    def __call__(
        self,
        f: Features,
        cross_language: bool = False,
        short: bool = False,
        asks: bool = False,
        lacks: bool = False,
    ) -> float:
        """`many` of one candidate; the flags matter to a cross-language pair only."""
        cos_turn, cos_chunk, cov_own, cov_chunk = (
            np.array([x], dtype=np.float64)
            for x in (f.cos_turn, f.cos_chunk, f.cov_own, f.cov_chunk)
        )
        cross, short_, asks_, lacks_ = (
            np.array([flag]) for flag in (cross_language, short, asks, lacks)
        )
        one = self.many(cos_turn, cos_chunk, cov_own, cov_chunk, cross, short_, asks_, lacks_)
        return float(one[0])

    def many(
        self,
        cos_turn: NDArray[np.float64],
        cos_chunk: NDArray[np.float64],
        cov_own: NDArray[np.float64],
        cov_chunk: NDArray[np.float64],
        cross_language: NDArray[np.bool_] | None = None,
        short: NDArray[np.bool_] | None = None,
        asks: NDArray[np.bool_] | None = None,
        lacks: NDArray[np.bool_] | None = None,
    ) -> NDArray[np.float64]:
        """The relevance of each candidate (flags as boolean arrays, None as all false)."""
        z = (
            self.cos_turn * cos_turn
            + self.cos_chunk * cos_chunk
            + self.cov_own * cov_own
            + self.cov_chunk * cov_chunk
            + self.bias
        )
        if cross_language is not None and self.cross is not None:
            n = len(z)
            flags = [
                np.zeros(n) if a is None else a.astype(np.float64) for a in (short, asks, lacks)
            ]
            z = np.where(cross_language, self.cross.apply(z, cos_turn, *flags), z)
        return sigmoid_many(z + self.shift)


@dataclass(frozen=True, slots=True)
class Features:
    cos_turn: float
    cos_chunk: float
    cov_own: float
    cov_chunk: float


# bench/experiments/recall_grid.py, USE-m3 (512-d), one memory per turn, dense context 1
# turn at 0.5, sparse context 2 turns at 0.5.
PLAIN_COVERAGE = Calibration(
    cos_turn=-3.049,
    cos_chunk=7.987,
    cov_own=3.293,
    cov_chunk=3.060,
    bias=-8.944,
    shift=6.3,
    # bench/experiments/cross_language_fit.py on bench/data/bilingual_calibration.json
    # (80 questions, 53 cross-language evidence turns among their candidates): the
    # likelihood fit, re-levelled so that as many unrelated pairs pass a threshold as in
    # one language (its `relevel`).
    cross=CrossLanguage(
        scale=1.219, turn=6.538, short=-0.503, asks=-1.214, lacks=-1.563, offset=1.347
    ),
)


# The coefficients a deployment sets for another encoder (`STRATA_RELEVANCE_WEIGHTS`).
RELEVANCE_FEATURES = ("cos_turn", "cos_chunk", "cov_own", "cov_chunk", "bias")


def fitted(weights: dict[str, float]) -> Calibration:
    """A calibration from coefficients fitted for another encoder: the same shift, no
    cross-language map (its level was set on the bundled encoder's cosines)."""
    return Calibration(**weights, shift=PLAIN_COVERAGE.shift, cross=None)


# Recall's default `min_relevance`: low enough never to hide the answer to an everyday
# question asked in other words than the memory ("Where do I live?" over "I moved to Lisbon
# last May." is 0.11-0.13: the encoder barely links them and no term is shared), high enough
# to leave most questions about something never mentioned with no result. On
# bench/data/everyday.json (bench/README.md, "Everyday questions"): hit@1 0.974 at 0.10
# against 0.980 with no floor, 17 of 30 never-mentioned questions empty; at 0.25 (the
# default before) hit@1 was 0.654, a fact under it while a filler above it was kept (fillers
# are now damped, `ranking.filler`). LoCoMo and LongMemEval measure the ranking, not the
# floor (a lower floor only keeps more).
DEFAULT_MIN_RELEVANCE = 0.1
# From this relevance a result is one the service is confident about: it reinforces its
# memory (`STRATA_REINFORCE_MIN_RELEVANCE`, docs/forgetting.md). 0.25 was the default floor
# measured in bench/HISTORY.md, "Cross-language relevance".
CONFIDENT_RELEVANCE = 0.25


def sigmoid(z: float) -> float:
    """`sigmoid_many` of one value."""
    return float(sigmoid_many(np.array([z], dtype=np.float64))[0])


def sigmoid_many(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """`sigmoid` elementwise, with the same two branches (no overflow either way)."""
    e = np.exp(-np.abs(z))
    out: NDArray[np.float64] = np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return out


def coverage(query_terms: Collection[int], terms: Iterable[int], also: Iterable[int] = ()) -> float:
    """The share of the query's distinct terms among `terms` or `also` (0 for a query
    with none). Each is only iterated, against the query's terms as a set: a memory's
    terms are kept as compact arrays (`app.services.search.text_facts`), and no set of
    them is built per candidate."""
    if not query_terms:
        return 0.0
    query = query_terms if isinstance(query_terms, set | frozenset) else frozenset(query_terms)
    found = query.intersection(terms)
    if also:
        found |= query.intersection(also)
    return len(found) / len(query)


def coverages(
    query_terms: frozenset[int], own: Iterable[int], chunk: Iterable[int]
) -> tuple[float, float]:
    """A candidate's two shares, `coverage(query, own)` and `coverage(query, chunk, own)`,
    with one intersection of the query's terms and its own: scoring asks both of each
    candidate."""
    if not query_terms:
        return 0.0, 0.0
    mine = query_terms.intersection(own)
    found = query_terms.intersection(chunk)
    found |= mine
    n = len(query_terms)
    return len(mine) / n, len(found) / n
