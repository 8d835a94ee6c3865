"""The extractive summariser (pure): sentences in, the most central and varied few out,
in time order, within a token cap. The caller embeds the sentences and counts tokens.

Selection is maximal marginal relevance over centrality: a sentence's centrality is its
cosine to the centroid of all sentences (what the period was mostly about), and each pick
is the sentence with the best `λ·centrality − (1 − λ)·max similarity to those picked`, so
the second sentence about the same thing loses to the first sentence about something else.
Filler ("好的", "Thanks!") never counts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Counter = Callable[[Sequence[str]], list[int]]

# Weight of centrality against redundancy in each pick.
MMR_LAMBDA = 0.7

# A sentence ends after 。！？!?… (and any closing quotes or brackets), or after an English
# full stop followed by a space and a capital, a digit or a non-ASCII character; a line
# break ends one too. "3.5" and "e.g. this" stay whole.
_CJK_END = re.compile(r"([。！？!?…]+[”’\"'）)\]」』]*)[ \t]*")
_EN_END = re.compile(r"((?<=[A-Za-z0-9)\]\"'])\.[”’\"')\]]*)[ \t]+(?=[A-Z0-9\"“‘(\[]|[^\x00-\x7f])")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[A-Za-z]+")
_DIGIT = re.compile(r"\d")

FILLER = frozenset(
    {
        "ok", "okay", "k", "thanks", "thank you", "thanks a lot", "thank you so much", "thx",
        "ty", "yes", "yeah", "yep", "no", "nope", "sure", "great", "cool", "nice", "got it",
        "sounds good", "alright", "all right", "fine", "right", "hi", "hello", "hey", "bye",
        "see you", "good night", "lol", "haha", "hmm", "uh huh", "you're welcome",
        "no problem", "of course", "good", "perfect", "awesome", "i see",
        "好的", "好", "好吧", "好啊", "行", "嗯", "嗯嗯", "哦", "噢", "哈哈", "谢谢", "谢谢你",
        "多谢", "是的", "是", "对", "对的", "收到", "明白", "明白了", "知道了", "没问题",
        "太好了", "可以", "不客气", "再见", "晚安", "你好", "您好", "好的谢谢", "ok谢谢",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of the input, in time order; `speaker` is who said it, if anyone."""

    text: str
    speaker: str | None = None


def split_sentences(text: str) -> list[str]:
    """Sentences of Chinese, English or mixed text, stripped, without empty ones."""
    marked = _EN_END.sub("\\1\n", _CJK_END.sub("\\1\n", text))
    return [p.strip() for p in marked.split("\n") if p.strip()]


def _normal(text: str) -> str:
    kept = (c for c in unicodedata.normalize("NFKC", text).lower() if c.isalnum() or c == " ")
    return " ".join("".join(kept).split())


def is_filler(text: str) -> bool:
    """Acknowledgements and greetings that say nothing about the period: a known phrase,
    or too short to carry a fact (under 4 Chinese characters and 3 English words, no
    number)."""
    normal = _normal(text)
    if not normal or normal in FILLER:
        return True
    if _DIGIT.search(text):
        return False
    return len(_CJK.findall(text)) < 4 and len(_WORD.findall(text)) < 3


def sentences_of(texts: Sequence[tuple[str | None, str]]) -> list[Sentence]:
    """The non-filler sentences of (speaker, text) pairs, in order. If everything is
    filler, everything: a summary of small talk is still a summary of that period."""
    every = [Sentence(s, speaker) for speaker, text in texts for s in split_sentences(text)]
    useful = [s for s in every if not is_filler(s.text)]
    return useful or every


def _unit(vectors: Sequence[Sequence[float]]) -> npt.NDArray[np.float64]:
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: npt.NDArray[np.float64] = m / norms
    return unit


def centrality(vectors: Sequence[Sequence[float]]) -> list[float]:
    """Each sentence's cosine to the centroid of all of them."""
    unit = _unit(vectors)
    centroid = unit.mean(axis=0)
    norm = np.linalg.norm(centroid)
    if norm == 0:
        return [0.0] * len(unit)
    return [float(x) for x in unit @ (centroid / norm)]


def select(
    vectors: Sequence[Sequence[float]],
    tokens: Sequence[int],
    cap: int,
    *,
    mmr_lambda: float = MMR_LAMBDA,
) -> list[int]:
    """Indices of the sentences to keep, in input (time) order: picked greedily by MMR
    over centrality, skipping any whose tokens would exceed `cap` (a shorter one later
    may still fit). The cost of each is `tokens[i]` plus one for the joint."""
    n = len(vectors)
    if n == 0 or cap <= 0:
        return []
    unit = _unit(vectors)
    central = np.asarray(centrality(vectors))
    sim = unit @ unit.T
    chosen: list[int] = []
    left = cap
    candidates = set(range(n))
    while candidates:
        best, best_score = -1, -np.inf
        for i in sorted(candidates):
            redundancy = max((sim[i, j] for j in chosen), default=0.0)
            score = mmr_lambda * central[i] - (1 - mmr_lambda) * redundancy
            if score > best_score:
                best, best_score = i, score
        candidates.discard(best)
        cost = tokens[best] + 1
        if cost <= left:
            chosen.append(best)
            left -= cost
    return sorted(chosen)


def _joins_tight(previous: str) -> bool:
    """No space after Chinese text: 我住上海。我喜欢猫。"""
    return bool(previous) and bool(_CJK.match(previous[-1]) or previous[-1] in "。！？，；：）」』")


def render(sentences: Sequence[Sentence]) -> str:
    """The chosen sentences in order. Where more than one speaker is among them, each run
    of one speaker's sentences starts with `speaker: ` and runs are separated by ` / `."""
    speakers = {s.speaker for s in sentences if s.speaker}
    runs: list[tuple[str | None, str]] = []
    for s in sentences:
        if runs and runs[-1][0] == s.speaker:
            text = runs[-1][1]
            runs[-1] = (s.speaker, text + ("" if _joins_tight(text) else " ") + s.text)
        else:
            runs.append((s.speaker, s.text))
    if len(speakers) <= 1:
        out = ""
        for _, text in runs:
            out += ("" if not out or _joins_tight(out) else " ") + text
        return out
    return " / ".join(f"{speaker}: {text}" if speaker else text for speaker, text in runs)


def extractive(
    sentences: Sequence[Sentence],
    vectors: Sequence[Sequence[float]],
    cap: int,
    count: Counter,
) -> str:
    """The summary of `sentences` (with their `vectors`) within `cap` tokens, as counted
    by `count` on the rendered text: the selection budgets per sentence, then the rendered
    text (speaker prefixes, joints) is counted exactly and the least central picks go
    until it fits."""
    if not sentences:
        return ""
    picked = select(vectors, count([s.text for s in sentences]), cap)
    central = centrality(vectors)
    while picked:
        text = render([sentences[i] for i in picked])
        if count([text])[0] <= cap:
            return text
        picked.remove(min(picked, key=lambda i: central[i]))
    # Not even one sentence fits: the most central one, cut to the cap by characters.
    best = max(range(len(sentences)), key=lambda i: central[i])
    text = sentences[best].text
    while text and count([text])[0] > cap:
        text = text[: max(1, len(text) * 3 // 4)]
        if len(text) == 1:
            break
    return text
