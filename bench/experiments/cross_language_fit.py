"""EXPERIMENT HARNESS: fits how the calibrated relevance (`scores.semantic`) of a
cross-language pair (a Chinese query and an English turn, or the reverse) maps onto the
scale of a same-language pair, on a bilingual set held apart from the development set.

Why: the calibration in `app.core.relevance` was fitted on English LoCoMo and gives the
share of query terms found in the memory much weight. A cross-language pair shares no terms
by construction, so its relevance reads "no lexical match" and the evidence of a Chinese
question over an English turn scores like noise (bench/README.md, "Cross-language
relevance").

How: the set is ingested into a running Strata, every question is asked with
`min_relevance: 0`, and each of its 50 candidates gives `z = logit(semantic) − SHIFT` (the
service's log-odds), a label (evidence or not), whether the pair is cross-language
(`app.core.ranking.language` of the question and of the turn, zh against en), the cosine of
the question with the turn's own line (`cos_turn`, the bundled encoder, as the service's
`turn` vector) and three flags of the turn: at most 3 index terms, an assistant turn that
only asks, and a when/where question over a turn naming no time/place (`app.core.ranking`).
One logistic regression over all candidates of the set,

    logit P(evidence) = b + z + cross · (c·z + t·cos_turn + Σ f·flag + d),

keeps the LoCoMo calibration's shape for same-language pairs (the coefficient of `z` is 1;
`b` absorbs this set's base rate, ~1 evidence turn among ~75) and finds the map that puts a
cross-language pair on the same scale: `z_same = (1 + c)·z + t·cos_turn + Σ f·flag + d`.
No cross-language evidence of the set has any of the flags, so their maximum-likelihood
weights are −∞: a standard normal prior (L2 1) keeps them finite. It prints the nested
models with their log-likelihoods; the last goes to `relevance.PLAIN_COVERAGE.cross`, and
the development set (bench/bilingual.py) then measures it. Run it against a server with
`STRATA_CROSS_LANGUAGE_RELEVANCE=false`, or the fit maps already-mapped values.

Usage: python bench/experiments/cross_language_fit.py --data PATH [--url URL] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import JSON, Api, machine_facts, print_machine, wait_ready, write_json
from bilingual import Question, ingest, load
from retrieval import Encoder

from app.core import ranking, relevance
from app.services.search import names_of, text_facts
from app.stores.vectors import MemoryPayload

Vec = NDArray[np.float64]
FLAGS = ("short", "asks", "lacks")


def logistic(x: Vec, y: Vec, offset: Vec, l2: Vec) -> Vec:
    """Maximum penalised likelihood of logit P = x·w + offset (a fixed term with
    coefficient 1), an L2 penalty per coefficient: Newton steps, each halved until the
    penalised log-likelihood improves."""

    def loss(w: Vec) -> float:
        t = x @ w + offset
        return float(np.sum(np.logaddexp(0, t) - y * t) + 0.5 * w @ (l2 * w))

    w = np.zeros(x.shape[1])
    for _ in range(200):
        p = 1 / (1 + np.exp(-np.clip(x @ w + offset, -50, 50)))
        grad = x.T @ (p - y) + l2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(l2)
        step = np.linalg.solve(hess, grad)
        before = loss(w)
        while loss(w - step) > before and np.abs(step).max() > 1e-12:
            step = step / 2
        w = w - step
        if np.abs(step).max() < 1e-9:
            break
    return w


# Which percentiles of the non-evidence candidates are matched: the upper half, where a
# `min_relevance` acts (the same-language median sits near the default 0.25).
LEVEL_QUANTILES = (50, 90)


def relevel(
    mapped_same: Vec,
    mapped_cross: Vec,
    shift: float,
    coef: dict[str, float],
    offset: float,
) -> dict[str, float]:
    """The likelihood fit orders cross-language pairs well but leaves their level loose: the
    evidence is ~1 candidate in 75, so whether an unrelated pair scores 0.3 or 0.6 costs it
    almost nothing (the two halves of the set put a typical unrelated pair at 0.30 and 0.61).
    A threshold is read as "this much about the query" whatever the language, so the level is
    set by the non-evidence candidates instead: an affine `a·m + c` of the cross-language
    log-odds (shift included) that puts their `LEVEL_QUANTILES` on the same-language ones'.
    Folded into the map: every coefficient times `a`, the offset `a·offset + (a − 1)·shift +
    c`, so the service still adds `shift` after it."""
    lo, hi = LEVEL_QUANTILES
    same_lo, same_hi = np.percentile(mapped_same, [lo, hi])
    cross_lo, cross_hi = np.percentile(mapped_cross, [lo, hi])
    a = float((same_hi - same_lo) / (cross_hi - cross_lo))
    c = float(same_lo - a * cross_lo)
    return {
        "a": a,
        "c": c,
        **{n: a * w for n, w in coef.items()},
        "offset": a * offset + (a - 1) * shift + c,
    }


def log_odds(semantic: float) -> float:
    s = min(max(semantic, 1e-6), 1 - 1e-6)
    return math.log(s / (1 - s)) - relevance.PLAIN_COVERAGE.shift


async def candidates(api: Api, doc: JSON, questions: list[Question]) -> list[JSON]:
    """Every question's 50 candidates as the service ranks them, with `min_relevance: 0`."""
    users = {c["id"]: c["user_id"] for c in doc["conversations"]}
    out: list[JSON] = []
    for q in questions:
        body = {
            "user_id": users[q.conversation],
            "query": q.question,
            "top_k": 50,
            "as_of": doc["as_of"],
            "reinforce": False,
            "min_relevance": 0,
        }
        data, _ = await api.recall(body)
        for r in data["results"] if data is not None else []:
            ids = [src["message_id"] for src in r["sources"]]
            out.append(
                {
                    "question": q.question,
                    "content": r["content"],  # the indexed line the `turn` vector embeds
                    "semantic": float(r["scores"]["semantic"]),
                    "evidence": any(i in q.evidence for i in ids),
                }
            )
    return out


async def main_async(args: argparse.Namespace) -> int:
    print_machine(machine_facts())
    doc, questions = load(args.data)
    async with Api(args.url, None, 120) as api:
        if not await wait_ready(api, 60):
            print(f"server at {args.url} is not ready", file=sys.stderr)
            return 2
        await ingest(api, doc)
        rows = await candidates(api, doc, questions)
    encoder = Encoder(threads=2)
    lines = sorted({r["content"] for r in rows} | {r["question"] for r in rows})
    vec = dict(zip(lines, encoder.encode(lines), strict=True))
    z = np.asarray([log_odds(r["semantic"]) for r in rows])
    y = np.asarray([float(r["evidence"]) for r in rows])
    cross = np.asarray(
        [
            float(
                ranking.cross_language(
                    ranking.language(r["question"]),
                    ranking.language(MemoryPayload.text_of(r["content"], "user")),
                )
            )
            for r in rows
        ]
    )
    cos_turn = np.asarray([float(vec[r["question"]] @ vec[r["content"]]) for r in rows])
    pen = ranking.Penalties()
    shape = [text_facts(r["content"], r["content"].partition(": ")[0]) for r in rows]
    short = np.asarray([float(f.own_terms <= pen.short_terms) for f in shape])
    asks = np.asarray([float(f.asks_only(pen.asking_terms)) for f in shape])
    kinds = [ranking.asks_for(r["question"]) for r in rows]
    lacks = np.asarray(
        [
            float(k is not None and not names_of(r["content"], r["content"].partition(": ")[0], k))
            for r, k in zip(rows, kinds, strict=True)
        ]
    )
    n_pos = {k: int(((cross == k) & (y == 1)).sum()) for k in (0, 1)}
    print(f"candidates {len(z)}, evidence same-language {n_pos[0]}, cross-language {n_pos[1]}")
    for flag in FLAGS:
        f = {"short": short, "asks": asks, "lacks": lacks}[flag]
        n_ev = int((cross * y).sum())
        print(
            f"{flag}: cross-language evidence {int((f * cross * y).sum())}/{n_ev},"
            f" other cross-language candidates {int((f * cross * (1 - y)).sum())}/"
            f"{int((cross * (1 - y)).sum())}"
        )
    fits: JSON = {}
    features = {
        "z": z,
        "cos_turn": cos_turn,
        "short": short,
        "asks": asks,
        "lacks": lacks,
    }
    shift = relevance.PLAIN_COVERAGE.shift
    for names in (
        ["z"],
        ["z", "cos_turn"],
        ["z", "cos_turn", "short", "asks"],
        ["z", "cos_turn", "short", "asks", "lacks"],
    ):
        x = np.column_stack([np.ones_like(z), *(cross * features[n] for n in names), cross])
        # A flag no cross-language evidence has (all three, on this set) separates the
        # classes: its maximum-likelihood weight is −∞. A standard normal prior on the
        # flags' weights (L2 1) keeps them finite; the rest are barely penalised.
        l2 = np.asarray([1e-3, *(1.0 if n in FLAGS else 1e-3 for n in names), 1e-3])
        w = logistic(x, y, z, l2)
        coef = dict(zip(names, w[1:-1], strict=True))
        coef["z"] += 1  # the map's scale: z itself is in the offset term
        mapped = np.where(cross == 1, sum(c * features[n] for n, c in coef.items()) + w[-1], z)
        ll = float(np.sum(y * (w[0] + mapped) - np.logaddexp(0, w[0] + mapped)))
        terms = " + ".join(f"{c:.3f}·{n}" for n, c in coef.items())
        print(
            f"[{', '.join(names)}] logit P = {w[0]:.3f} + z_same; cross-language "
            f"z_same = {terms} + {w[-1]:.3f}  (log-likelihood {ll:.1f})"
        )
        for k, label in ((0, "same-language"), (1, "cross-language")):
            sel = (cross == k) & (y == 1)
            print(
                f"  {label} evidence median relevance "
                f"{relevance.sigmoid(float(np.median(z[sel])) + shift):.3f} -> "
                f"{relevance.sigmoid(float(np.median(mapped[sel])) + shift):.3f}"
            )
        fits[", ".join(names)] = {"b": w[0], **coef, "offset": w[-1], "log_likelihood": ll}
    last = fits[", ".join(names)]
    level = relevel(
        mapped_same=z[(cross == 0) & (y == 0)] + shift,
        mapped_cross=mapped[(cross == 1) & (y == 0)] + shift,
        shift=shift,
        coef={n: last[n] for n in names},
        offset=last["offset"],
    )
    print(
        f"re-levelled (the {LEVEL_QUANTILES} percentiles of the non-evidence candidates' "
        f"log-odds matched, cross-language to same-language): a = {level['a']:.3f}, "
        f"c = {level['c']:.3f}; cross-language z_same = "
        + " + ".join(f"{level[n]:.3f}·{n}" for n in names)
        + f" + {level['offset']:.3f}"
    )
    threshold = math.log(relevance.DEFAULT_MIN_RELEVANCE / (1 - relevance.DEFAULT_MIN_RELEVANCE))
    for label, sel in (("non-evidence", y == 0), ("evidence", y == 1)):
        same_pass = float(np.mean(z[(cross == 0) & sel] + shift >= threshold))
        before = mapped[(cross == 1) & sel] + shift
        after = level["a"] * before + level["c"]
        print(
            f"  {label} at min_relevance {relevance.DEFAULT_MIN_RELEVANCE}: same-language "
            f"{same_pass:.3f} pass; cross-language {float(np.mean(before >= threshold)):.3f} "
            f"-> {float(np.mean(after >= threshold)):.3f}"
        )
    out: JSON = {
        "data": str(args.data),
        "relevelled": level,
        "candidates": len(z),
        "evidence": {"same_language": n_pos[0], "cross_language": n_pos[1]},
        "fits": fits,
    }
    write_json(args.out, out)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--out", type=Path, default=Path("bench/results/cross_language_fit.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
