"""Intrinsic importance without an LLM: how much a turn matters in itself, in [0, 1].

The heuristic (the table in docs/forgetting.md, "Intrinsic importance") adds evidence to a
base of 0.3: the speaker talks about themself (I, my, 我: +0.15); a durable preference or
fact (prefer, allergic, never, 喜欢, 过敏: +0.25); a plan or decision (plan, going to,
decided, booked, 计划, 打算, 要去: +0.2); a name, place or job (name is, live in, work at, 叫,
住在: +0.2); a number or date (digits, weekdays, months, next week, 星期, 明天, 下个月:
+0.1); an explicit request to remember (remember, important, 记住, 别忘: +0.35); long
enough to carry a fact (80 characters, 30 in Chinese: +0.1). The same statement in either
language is rated alike.

Filler (ok, thanks, lol, 好的, 哈哈, 嗯 … with nothing else) is 0.02, and a very short turn
loses 0.15. With an LLM the extraction call rates importance instead (`LLMRating`), and
`blend` says how the two combine.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BASE = 0.3

_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|we|our)\b|我", re.IGNORECASE)
_DURABLE = re.compile(
    r"\b(always|never|prefer\w*|favou?rite|allergic|allergy|hate|love|can't stand|"
    r"vegetarian|vegan)\b|喜欢|讨厌|过敏|从不|总是|最爱|偏好|素食",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"\b(plan\w*|going to|decided|decision|will|i'll|we'll|booked|schedul\w*|deadline|"
    r"appointment)\b|"
    r"计划|打算|决定|准备|预订|预约|安排|要去|将要|即将",
    re.IGNORECASE,
)
_IDENTITY = re.compile(
    r"\b(name is|call me|live in|lives in|work (?:at|as|for)|moved to|born|married|"
    r"my (?:wife|husband|son|daughter|mother|father|boss|dog|cat))\b|"
    r"叫|名字|住在|工作|搬到|出生|结婚|老婆|老公|儿子|女儿|妈妈|爸爸",
    re.IGNORECASE,
)
_NUMBER_OR_DATE = re.compile(
    r"\d|\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|"
    r"march|april|may|june|july|august|september|october|november|december|tomorrow|"
    r"yesterday|tonight|(?:next|last) (?:week|month|year|weekend))\b|"
    r"[一二三四五六七八九十两]+[点号月日岁个]|星期|周[一二三四五六日末]|明天|后天|昨天|前天|"
    r"今晚|[上下]个?(?:月|周|星期)|明年|去年|月底|年底",
    re.IGNORECASE,
)
_REMEMBER = re.compile(
    r"\b(remember|don't forget|do not forget|important|note that)\b|记住|别忘|不要忘|重要|记一下",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(?:\s|[,.!?~…，。！？、]|ok(?:ay)?|k|sure|yes|yeah|yep|no|nope|thanks?|thank you|thx|"
    r"lol|haha+|hmm+|cool|nice|great|got it|i see|bye|hi|hello|hey|"
    r"好的?|嗯+|哦+|哈+|谢谢|收到|是的|对|行|好吧|再见|你好)*$",
    re.IGNORECASE,
)
_HAN = re.compile(r"[\u4e00-\u9fff]")

FILLER = 0.02


def intrinsic(text: str) -> float:
    """The heuristic's rating of `text`, in [0, 1] (table above)."""
    t = text.strip()
    if not t or _FILLER.match(t):
        return FILLER
    score = BASE
    if _FIRST_PERSON.search(t):
        score += 0.15
    if _DURABLE.search(t):
        score += 0.25
    if _PLAN.search(t):
        score += 0.2
    if _IDENTITY.search(t):
        score += 0.2
    if _NUMBER_OR_DATE.search(t):
        score += 0.1
    if _REMEMBER.search(t):
        score += 0.35
    long_enough = 30 if _HAN.search(t) else 80
    if len(t) >= long_enough:
        score += 0.1
    elif len(t) < 8:
        score -= 0.15
    return round(min(1.0, max(0.0, score)), 3)


# An LLM's rating of a text in [0, 1], or None when it gave none (the fact extraction
# call rates each fact it returns, and hands the rating here).
LLMRating = Callable[[str], float | None]


def blend(text: str, llm_rating: float | None, llm_share: float = 0.8) -> float:
    """With an LLM's rating, mostly the model's judgement, kept honest by the heuristic's
    (a model that rates everything 1 still ranks "ok" below a stated allergy)."""
    heuristic = intrinsic(text)
    if llm_rating is None:
        return heuristic
    rating = min(1.0, max(0.0, llm_rating))
    return round(llm_share * rating + (1 - llm_share) * heuristic, 3)
