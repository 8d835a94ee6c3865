"""How recall ranks its candidates (pure, no I/O): rank fusion with a dense weight per
candidate, the penalties that put information before filler, and the change markers that
let a newer statement go above the older one it replaces.

Every rule and number here was measured on LoCoMo and the bilingual development set
(bench/HISTORY.md, "Recall trust"; `bench/experiments/recall_grid.py` reproduces them).
"""

from __future__ import annotations

import bisect
import calendar
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from app.core import terms

K = TypeVar("K", bound=Hashable)
Floats = NDArray[np.float64]
Flags = NDArray[np.bool_]
Language = Literal["zh", "en", "mixed"]
AnswerType = Literal["time", "place"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN = re.compile(r"[A-Za-z]+")
# A statement that replaces an earlier one ("I changed the flight to …", 改成…). Not a bare
# "now": in conversation it is mostly filler ("right now"), and promoting those turns cost
# LoCoMo R@5 0.016 with no gain on the bilingual set (bench/HISTORY.md). The everyday words
# of an update (bumped, went with, in the end, 跳槽, 改了, 最后还是 …) put the newer fact
# above the older for 20 of everyday.json's 21 updates (12 before), LoCoMo R@10 0.781 kept.
# More everyday words of a change: bump … to / up, pushed it to Sunday / back a week, went up
# to $2400, down to 77 kg, swapped … for, anymore, 挪到, 改期 … The ambiguous ones only in
# an update's shape: "a bump on my head", "pushed to main", "pushed 3 commits", "up to 3
# people", "comes down to 2 options", "swapped stories", 调到静音, 已经不早了, 天气变成这样
# say nothing changed (two reviews' probes; bench/README.md, "Follow-ups in a new
# conversation"). Bare, some still match where nothing changed ("I don't know anymore",
# 改期的事情你别管): a match only moves a newer turn above an older similar one.
_WHEN = (
    r"(?:(?:next \w+|tomorrow|tonight|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|mon|tue|wed|thu|fri|sat|sun|a (?:day|week|month)|january|february|march|april|"
    r"may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|"
    r"sep|sept|oct|nov|dec)\b|(?:the )?\d{1,2}(?:st|nd|rd|th)\b|\d{1,2}(?::\d\d)?\s*[ap]m\b|"
    r"\d{1,2}/\d{1,2}|\d+ (?:hours?|days?|weeks?|months?|minutes?|mins?)\b)"
)
_CHANGE = re.compile(
    r"改成|改到|改为|换成|换了|取消|不再|推迟|提前到|提前了|提前至|搬到|退了|"
    r"改了|换号|跳槽|涨到|降到|加到|减到|最后还是|更新一下|挪到|延到|延期|改期|搬去|"
    r"换到(?=[周下上明后这每早晚中]|[\d一二三四五六七八九十两]{1,3}(?:号|点|月|:))|携号转网|"
    r"倒闭|跑路|辞职|离职|调了时间|时间调|调整了时间|调到(?=[周下上明后这每早晚中]|[\d一二三四五六七八九十两]{1,3}(?:号|点|月|:))|改吃|"
    r"(?<!创)新(?:工作|号码?|地址|公司|手机|电话|邮箱|单位|规定|政策)|"
    r"\b(?:instead|changed?|cancel(?:l?ed)?|no longer|moved|switched|postponed|rescheduled|"
    r"stopped|quit|bumped|raised|increased|decreased|lowered|went with|in the end|anymore|"
    r"upgraded|downgraded|rebooked|ported|retired|replac(?:e|ed|es|ing)|vetoed|settled on|"
    r"bump (?:\w+ ){0,3}(?:up|to)|"
    r"swapped (?:my|our|the|his|her|their) (?:\w+ ){0,2}for|"
    r"new (?:email|number|phone|address|password|job|apartment|place|house)|"
    r"start(?:ing|ed|s)? (?:a |my )?new (?:job|role|position|gig|school|class)|"
    # "switching to tylenol", not "i'm thinking of switching to a plan that …"
    r"(?<!of )(?<!about )(?<!considering )(?<!might be )switching to|"
    r"switch(?:ing)? (?:\w+ )?over to|"
    r"(?:lower|raise|drop) (?:it|that|this) to)\b|"
    r"^\W*update\b|"
    # "1.5 cups morning and night from now on": with a number; "i'll be more mindful of my
    # waste from now on" is a resolution, no new value.
    r"\d[^.!?\n]{0,60}\bfrom now on\b|\bfrom now on\b[^.!?\n]{0,60}\d|"
    # "starting in november", "2250 starting august"; not "starting monday i'm on vacation"
    # nor "starting next week is spring break"
    r"\bstarting (?:in |from )?(?:january|february|march|april|may|"
    r"june|july|august|september|october|november|december)\b|"
    rf"\bpushed (?:\w+ ){{0,2}}(?:(?:back|out) (?:to |till |until )?|(?:to|till|until) ){_WHEN}|"
    # A bare hour after "to" where the sentence goes on about why ("they pushed standup to
    # 10 so the london folks can join"), not a count ("pushed it to 3 people").
    r"\bpushed (?:\w+ ){0,2}(?:to|till|until) \d{1,2}(?::\d\d)?"
    r"(?=\s*(?:$|[,.;!)]|(?:so|because|since|instead|for|and)\b))|"
    r"\b(?:went|gone|goes|got|now|just|is|are|was|'s|'m|am|ya|yeah|yep|so) down to \$?\d|"
    r"\b(?:went|gone|goes|now|just) up to \$?\d|^\W*down to \$?\d",
    re.IGNORECASE,
)


# A statement of how things stand now ("he's with mrs greene now", 现在去公司旁边的乐刻)
# or a correction ("actually i got a new one", 不对不对，是13号):
# a change only beside the statement it follows in the same conversation
# (`NewerFactsFirst`), as "now" runs through every kind of talk.
_CORRECTS = (
    r"^\W*(?:[哦噢啊额呃嗯]\W*)?不对|说错了|搞错了|记错了|更正|"
    r"\b(?:i meant|correction)\b|"
    r"^\W*(?:actually|oops|wait|no,? (?:sorry|wait)|sorry,? (?:i meant|it's|its|not))\b"
)
_CURRENT = re.compile(
    r"现在|目前|如今|"
    # 后来 opening a clause: what came of it ("后来他自己选了大提琴").
    r"(?:^|[，。,.!！?？;；]\s*)后来|"
    r"\b(?:(?<!for )(?<!right )(?<!just )(?<!until )(?<!by )now(?! that| on)|these days|"
    r"currently|nowadays)\b|" + _CORRECTS,
    re.IGNORECASE,
)
# A correction of what was just said: "sorry not lincoln center lol, it's the school
# auditorium, i was thinking of last year", 不对，是13号.
_CORRECTION = re.compile(_CORRECTS, re.IGNORECASE)


# What a question asks for: a time ("When did …", 什么时候) or a place ("Where …", 哪里).
_ASKS: dict[AnswerType, re.Pattern[str]] = {
    "time": re.compile(
        r"^\W*(?:and |so |but )?when\b|\bwhen\W*$|\bwhat (?:time|date|days?|year|month)\b|"
        r"[,;]\s*when(?:'s| is| was| does| did| do| are| will| should)\b|"
        r"\bwhich (?:days?|date|year|month|week|weekend)\b|\bhow (?:long|often)\b|"
        r"(?<!what )(?<!which )\bdeadline\b|多久一次|几天一次|时间\W*$|"
        r"什么时候|啥时候?|几时|何时|哪天|哪一天|几号|几点|几月|哪年|哪一年|多久|多长时间|"
        r"什么时间|哪个月|星期几|周几|礼拜几|哪个周末|哪几天",
        re.IGNORECASE,
    ),
    "place": re.compile(
        r"\bwhere\b|\b(?:which|what) (?:city|country|town|place|state|island|area|"
        r"neighbou?rhood|restaurant|cafe|store|shop|park|school|university|hotel|airport)\b|"
        r"哪里|哪儿|在哪|去哪|住哪|什么地方|哪个(?:城市|国家|地方|省|州)|哪座城市|"
        # 哪家酒店, 哪个医院: a place by what it is (not 哪家公司: that asks for a name).
        r"哪(?:个|家|所)(?:酒店|宾馆|民宿|饭店|餐厅|医院|诊所|学校|幼儿园|小区|商场|健身房)",
        re.IGNORECASE,
    ),
}
# A statement that names a time: dates, days, months, seasons, "last week", 昨天, 三月 …,
# and any number (a day, an hour, a year: loose on purpose, it only spares a penalty).
# "may", "march", "fall" and a bare "am" are left out: they are mostly other words.
# The English part is searched in the lowercased text (with IGNORECASE it took 4× as long,
# and a when-question's first recall over new memories runs it on every candidate); the
# Chinese part only in text with CJK characters.
_NAMES_TIME_EN = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|weekends?|weeks?|months?|years?|"
    r"days?|mornings?|afternoons?|evenings?|nights?|noon|midnight|"
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?|"
    r"tue|tues|weds|thu|thur|thurs|fri|tmrw|tmr|tmrrw|tonite|"
    r"january|february|april|june|july|august|september|october|november|december|"
    r"summer|winter|spring|autumn|recently|lately|soon|since|until|o'clock|"
    r"birthday|anniversary|christmas|thanksgiving|easter|"
    r"\d{1,4}(?:st|nd|rd|th|s|ish)?|\d{1,2}\s*[ap]\.?m\.?)\b"
)
_NAMES_TIME_ZH = re.compile(
    r"昨天|今天|明天|前天|后天|今晚|昨晚|明晚|上周|下周|这周|本周|上个?月|下个?月|这个月|"
    r"去年|今年|明年|前年|周[一二三四五六日末]|星期|礼拜|早上|上午|中午|下午|晚上|凌晨|"
    r"最近|刚才|以前|之前|之后|以后|那天|当天|的时候|[春中]节|国庆|中秋|元旦|端午|清明|除夕|"
    # A bounded run: unbounded, a 32,000-digit text took 13 s to search (quadratic).
    r"(?<![0-9０-９一二三四五六七八九十两几半])[0-9０-９一二三四五六七八九十两几半]{1,8}\s{0,3}个?"
    r"(?:年|月|日|号|点|天|周|星期|小时|分钟)"
)
_HAS_CJK = re.compile(r"[\u3400-\u9fff]")
# A statement that names a place: a capitalised word inside a sentence (a proper noun:
# Lisbon, Paris; also people's names, the price of needing no tagger; not days and
# months), a place noun, a Chinese place suffix, or 在/搬到/住在 … followed by a name.
# Words that only end like a road: 走路 "walk", 一路, 迷路, 思路 …
_NOT_ROADS = r"(?!走路|一路|迷路|带路|上路|顺路|思路|套路|线路|网路|半路|出路|让路|赶路)"
_NAMES_PLACE = re.compile(
    r"(?<![.!?:]\s)(?<=\s)(?!I\b|I'|OK\b|Ok\b|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b|"
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\b)[A-Z][a-z]+|"
    r"\b(?:home|house|apartment|flat|city|town|village|country|park|beach|restaurant|cafe|"
    r"office|school|university|college|museum|store|shop|mall|hotel|airport|station|church|"
    r"gym|library|hospital|street|road|lake|mountain|island|downtown|abroad|overseas|lodge|"
    r"hall|center|centre|club|venue|bar|pub|clinic|studio|theater|theatre|stadium|campus|"
    r"neighborhood|neighbourhood|suburb)s?\b|"
    # Casual chat writes places in lower case: "lives in denver", "moved to austin", "on
    # main st".
    r"\b(?:live|lives|living|lived|moved|moving|based|located|born|raised|grew up|staying)"
    r" (?:in|to|at|near|outside) (?!(?:the|a|an|my|our|with|here|there|tonight|today|"
    r"tomorrow|bed|fear|love|touch|line|time|person|general|mind|shape|trouble|peace|denial|"
    r"case|order|front|place)\b)[a-z]{3,}|"
    r"\b[0-9a-z]+ (?:st|ave|blvd|rd)\b|"
    + _NOT_ROADS
    + r"[\u4e00-\u9fff](?:市|省|县|区|镇|村|州|国|岛|城|路|街|山|湖|河|港|站|机场|公园|"
    r"餐厅|饭店|酒店|学校|大学|小学|中学|高中|初中|幼儿园|学院|医院|诊所|银行|超市|商场|公司)|"
    r"(?:搬到|搬去|住在|来自|飞往|前往|去了|到了|回到|飞到|在)(?![这那哪])[\u4e00-\u9fffA-Za-z]{2}",
)
# A capitalised word that opens a sentence names a place when it stands as a subject or an
# answer ("Lisbon is lovely.", "Paris!", "Lisbon, since 2019.") and is not a common opener
# ("Thanks!", "Great, …"); an imperative ("See you on Friday") is followed by its object.
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)([A-Z][a-z]+)(?=\s+(?:is|was)\b|\s*[,.!?;:]|\s*$)")
_OPENER_WORDS = (
    "yes yeah yep no nope ok okay thanks thank sounds sure wow hey hi hello great cool nice "
    "awesome oh well really definitely absolutely haha lol congrats congratulations good "
    "glad sorry love tell let maybe just also totally exactly right true agreed anyway plus "
    "still then now please hope happy aw aww omg ah hmm sweet amazing wonderful fantastic "
    "monday tuesday wednesday thursday friday saturday sunday january february march april "
    "may june july august september october november december"
)
_OPENERS = terms.ENGLISH_STOPWORDS | frozenset(_OPENER_WORDS.split())


def asks_for(query: str) -> AnswerType | None:
    """The kind of answer a question asks for, when it asks for a time or a place."""
    for kind, pattern in _ASKS.items():
        if pattern.search(query):
            return kind
    return None


def names(text: str, kind: AnswerType) -> bool:
    """Does the text name something of that kind (a time, a place)? A cheap stand-in for
    the answer-type match of question answering: the turn that says *when* or *where*."""
    if kind == "time":
        return _NAMES_TIME_EN.search(text.lower()) is not None or (
            _HAS_CJK.search(text) is not None and _NAMES_TIME_ZH.search(text) is not None
        )
    if _NAMES_PLACE.search(text) is not None or _names_place_zh(text):
        return True
    return any(w.lower() not in _OPENERS for w in _SENTENCE_START.findall(text))


# A Chinese place without a place suffix (柏林, 首尔, 清迈) after a verb of going: the
# dictionary's tags for foreign names are unreliable (柏林 `nr`, 首尔 `d`, 清迈 `a`), so any
# word of two or more characters counts unless it is tagged as what follows 去 when no place
# does (a verb, a time, a pronoun, a number: 去吃饭, 去年, 去那儿).
_GOING_ZH = frozenset(("去", "去过", "飞往", "前往", "飞去", "出发去", "往"))
_NOT_PLACE_TAGS = ("v", "t", "r", "m", "q", "p", "u", "c", "y", "e", "o", "f")


def _names_place_zh(text: str) -> bool:
    if _HAS_CJK.search(text) is None:
        return False
    seg = terms.segmenter()
    tags = seg.word_tags()
    after_going = False
    for word in seg.cut(text):
        if after_going and len(word) >= 2 and _HAS_CJK.match(word):
            tag = tags.get(word) or "n"
            if not tag.startswith(_NOT_PLACE_TAGS):
                return True
        after_going = word in _GOING_ZH
    return False


_MONTHS = {
    name: n
    for n, name in enumerate(
        ("january", "february", "march", "april", "may", "june", "july", "august",
         "september", "october", "november", "december"),
        1,
    )
}  # fmt: skip
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december)"
_YEAR = r"((?:19|20)\d\d)"
_DATES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+" + _YEAR, re.IGNORECASE), "mdy"),
    (
        re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+" + _YEAR, re.IGNORECASE),
        "dmy",
    ),
    (re.compile(_YEAR + r"\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), "zh-ymd"),
    (re.compile(r"\b" + _MONTH + r",?\s+(?:of\s+)?" + _YEAR, re.IGNORECASE), "my"),
    (re.compile(_YEAR + r"\s*年\s*(\d{1,2})\s*月"), "zh-ym"),
    # "in 2022", not "in 2000 words" ("since 2023" is open-ended: not a period).
    (
        re.compile(
            r"\b(?:in|during|of|throughout)\s+" + _YEAR + r"\b(?!\s+(?:[a-z]+s|people)\b)",
            re.IGNORECASE,
        ),
        "y",
    ),
    (re.compile(_YEAR + r"\s*年"), "y"),
)
# How long after a named day, month or year a memory may still be about it: an event is
# often told some days later ("last weekend", 上周). One day before it too: a user's
# evening in UTC+8 is the day before in UTC.
PERIOD_TELLING = timedelta(days=7)
PERIOD_BEFORE = timedelta(days=1)


def named_period(query: str) -> tuple[datetime, datetime] | None:
    """The absolute period a question names ("on October 13, 2023", "in July 2023", "in
    2022", 2023年3月5日), as [start, end) in UTC, from `PERIOD_BEFORE` before it to
    `PERIOD_TELLING` after it; several dates ("between March 2023 and June 2023") give the
    span from the first to the last. None when it names none: relative dates ("last
    week") are the caller's to send as a `time_range`."""
    # The spans read so far, kept sorted and apart, so that an overlap is one bisection
    # (a scan of them all made a pasted run of 5,000 dates take seconds).
    starts: list[int] = []
    ends: list[int] = []
    periods: list[tuple[datetime, datetime]] = []
    for pattern, form in _DATES:
        for m in pattern.finditer(query):
            at = bisect.bisect_left(starts, m.end())
            if at and ends[at - 1] > m.start():
                continue  # "2023年3月" inside "2023年3月5日", already read
            starts.insert(at, m.start())
            ends.insert(at, m.end())
            try:
                periods.append(_period_of(m, form))
            except ValueError:  # "February 30, 2023": not a date
                continue
    if not periods:
        return None
    return min(p[0] for p in periods) - PERIOD_BEFORE, max(p[1] for p in periods) + PERIOD_TELLING


def _period_of(m: re.Match[str], form: str) -> tuple[datetime, datetime]:
    """The [start, end) of one matched date, without slack."""
    if form in ("mdy", "dmy", "zh-ymd"):
        if form == "mdy":
            year, month, day = int(m[3]), _MONTHS[m[1].lower()], int(m[2])
        elif form == "dmy":
            year, month, day = int(m[3]), _MONTHS[m[2].lower()], int(m[1])
        else:
            year, month, day = int(m[1]), int(m[2]), int(m[3])
        start = datetime(year, month, day, tzinfo=UTC)
        return start, start + timedelta(days=1)
    if form in ("my", "zh-ym"):
        year, month = (int(m[2]), _MONTHS[m[1].lower()]) if form == "my" else (int(m[1]), int(m[2]))
        start = datetime(year, month, 1, tzinfo=UTC)
        return start, start + timedelta(days=calendar.monthrange(year, month)[1])
    year = int(m[1])
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def language(text: str) -> Language:
    """'zh', 'en' or 'mixed', from the share of CJK characters among letters: about four
    Latin letters make a word, so `share = cjk / (cjk + latin / 4)`; zh above 0.8, en below
    0.2. Text with neither (numbers, emoji) counts as en."""
    # Counted over runs, not one match a character (~30% less time, the same counts).
    cjk = sum(map(len, _CJK.findall(text)))
    latin = sum(map(len, _LATIN.findall(text)))
    if cjk + latin == 0:
        return "en"
    share = cjk / (cjk + latin / 4)
    return "zh" if share > 0.8 else "en" if share < 0.2 else "mixed"


def cross_language(a: Language, b: Language) -> bool:
    """One text Chinese and the other English (a mixed text shares a language with both)."""
    return a != b and "mixed" not in (a, b)


def states_change(text: str) -> bool:
    """Does the text say something changed (改成, 取消, instead, no longer, moved …)?"""
    return _CHANGE.search(text) is not None


def states_current(text: str) -> bool:
    """Does the text say how things stand now (now, these days, 现在, 目前)?"""
    return _CURRENT.search(text) is not None


def corrects(text: str) -> bool:
    """Does the text correct what was just said (actually, "sorry not …", 不对, 记错了)?"""
    return _CORRECTION.search(text) is not None


# --------------------------------------------------------------------------- fusion


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """Qdrant's weighted RRF, done here so the dense weight can depend on the candidate:
    a list of weight `w` adds `1 / (k − 1 + rank / w)` (rank from 1)."""

    k: int = 10
    sparse: float = 1.0
    dense_same: float = 0.5  # candidate in the query's language, or either mixed
    dense_cross: float = 4.0  # candidate in another language: only the encoder can match it

    def dense_for(self, query_language: Language, candidate_language: Language) -> float:
        if cross_language(query_language, candidate_language):
            return self.dense_cross
        return self.dense_same

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
    # A reaction that states nothing (`filler`): on the fused score and on the relevance.
    filler: float = 0.5
    no_answer_type: float = 0.0  # a when/where question, and the text names no time/place
    outside_period: float = 0.0  # the question names a date, the memory is from another


def own_match_many(
    cov_own: Floats, cov_chunk: Floats, cos_turn: Floats, cos_chunk: Floats
) -> Floats:
    """How much of each match is the memory's own text, in [0, 1]: the larger of its share
    of the matched query terms and its own vector's cosine relative to the indexed one."""
    with np.errstate(divide="ignore", invalid="ignore"):
        term_share = np.where(cov_chunk > 0, cov_own / np.where(cov_chunk > 0, cov_chunk, 1), 0)
    vector_share = np.minimum(1.0, np.maximum(0.0, cos_turn / np.maximum(cos_chunk, 1e-9)))
    out: Floats = np.minimum(1.0, np.maximum(term_share, vector_share))
    return out


def own_match(cov_own: float, cov_chunk: float, cos_turn: float, cos_chunk: float) -> float:
    """`own_match_many` of one candidate."""
    one = own_match_many(
        *(np.array([x], dtype=np.float64) for x in (cov_own, cov_chunk, cos_turn, cos_chunk))
    )
    return float(one[0])


def asks_only(role: str | None, text: str, max_terms: int = 4) -> bool:
    """An assistant turn that is a short question and states nothing."""
    t = text.strip()
    return role == "assistant" and t.endswith(("?", "？")) and len(terms.tokenize(t)) <= max_terms


# What a user says that states nothing by itself ("haha yeah", "ok thanks", 嗯嗯, 好的): a
# user turn whose every index term is one of these is a filler (`filler`).
_REACTION_WORDS = (
    "haha hahaha hehe lol lmao yeah yes yep yup no nope ok okay sure cool nice great thanks "
    "thank thx ty hi hey hello bye good fine wow oh ah aw hmm right true exactly indeed "
    "totally agreed awesome amazing lovely sweet perfect glad sorry like love tell ask "
    "pretty really definitely absolutely fun bad worry worries welcome morning night "
    "哈哈 哈哈哈 呵呵 嘿嘿 嗯 嗯嗯 好 好的 好吧 对 对的 是 是的 谢谢 多谢 谢啦 唉 哎 行 可以 "
    "没事 没问题 不错 挺好 还行 知道 明白 收到 嗯呢 哦 哦哦 啊 呀 吧 没想 晚安 早 你好 拜拜 "
    "要 要的 好啊 当然 please pls know got make makes sense sound sounds note noted try will "
    "还行吧 好吧哈哈"
)
_REACTIONS = frozenset(t for w in _REACTION_WORDS.split() for t in terms.tokenize(w))
_NAME_INSIDE = re.compile(r"(?<=[\w,;:)\]] )([A-Z][\w'-]*)")
_NOT_NAMES = frozenset({"I", "I'm", "I'll", "I've", "I'd", "OK", "Ok"})


def filler(role: str | None, text: str, max_terms: int = 3) -> bool:
    """A turn that states nothing the user could later ask about: an assistant's short
    reaction of at most `max_terms` index terms ("That sounds delicious.", 好可爱的名字！,
    "How do you like it?") or a user's ("haha yeah", "ok thanks", 嗯嗯). At four terms,
    10 of LoCoMo's evidence turns were damped (its second speaker is the `assistant`; R@10
    0.781 -> 0.779); at three, 2. The encoder scores
    them close to any question on their topic (their indexed vector holds the turn before),
    so they went above the fact they reacted to (bench/README.md, "Everyday questions").
    A number or a name inside a sentence ("Crete is lovely in September.") is a statement."""
    t = text.strip()
    if any(ch.isdigit() for ch in t):
        return False
    if any(m.group(1) not in _NOT_NAMES for m in _NAME_INSIDE.finditer(t)):
        return False
    words = terms.tokenize(t)
    if role == "assistant":
        return len(words) <= max_terms
    return all(w in _REACTIONS for w in words)


def penalty_factor_many(
    own: Floats,
    index_terms: Floats,
    asking: Flags,
    p: Penalties,
    lacks_answer_type: Flags,
    outside_period: Flags,
    is_filler: Flags,
) -> Floats:
    """The product of the penalties that apply to each candidate, in (0, 1]."""
    factor = 1.0 - p.context_only * (1.0 - np.minimum(1.0, np.maximum(0.0, own)))
    factor = np.where(is_filler, factor * (1.0 - p.filler), factor)
    factor = np.where(index_terms <= p.short_terms, factor * (1.0 - p.short), factor)
    factor = np.where(asking, factor * (1.0 - p.asking_only), factor)
    factor = np.where(lacks_answer_type, factor * (1.0 - p.no_answer_type), factor)
    out: Floats = np.where(outside_period, factor * (1.0 - p.outside_period), factor)
    return out


def penalty_factor(
    own: float,
    index_terms: int,
    asking: bool,
    p: Penalties,
    lacks_answer_type: bool = False,
    outside_period: bool = False,
    is_filler: bool = False,
) -> float:
    """`penalty_factor_many` of one candidate."""
    flags = (np.array([b]) for b in (asking, lacks_answer_type, outside_period, is_filler))
    asks, lacks, outside, filler_ = flags
    one = penalty_factor_many(
        np.array([own]), np.array([float(index_terms)]), asks, p, lacks, outside, filler_
    )
    return float(one[0])


# --------------------------------------------------------------------------- subjects
#
# Whom a statement is about, coarsely: the relatives, people and pets it names, so that a
# newer statement about one is not taken for an update of an older one about another ("my
# brother just moved to austin" does not replace "my sister lives in denver"; 女儿最近开始学
# 小提琴了 does not replace 我儿子在学钢琴). Two names for one person share a class (mom and
# 妈妈, gf and 老婆, manager and boss); 姐姐 and 妹妹 are both "sister", as English has it.
_SUBJECT_CLASS: dict[str, frozenset[str]] = {}
for _cls, _words in {
    "mother": "mom mum mommy mama mother 妈妈 老妈 母亲 妈",
    "father": "dad daddy papa father 爸爸 老爸 父亲 爸",
    "sister": "sister sis 姐姐 妹妹 老姐 老妹 姐 妹",
    "brother": "brother bro 哥哥 弟弟 老哥 老弟 哥 弟",
    "son": "son 儿子",
    "daughter": "daughter 女儿 闺女",
    "partner": "wife husband hubby wifey gf bf girlfriend boyfriend fiance fiancee fiancé "
    "fiancée partner spouse 老婆 老公 妻子 丈夫 媳妇 对象 男朋友 女朋友 男友 女友 未婚夫 "
    "未婚妻 爱人 另一半",
    "grandmother": "grandma grandmother granny nana 奶奶 外婆 姥姥",
    "grandfather": "grandpa grandfather granddad gramps 爷爷 外公 姥爷",
    "aunt": "aunt auntie 姑姑 姨妈 小姨",
    "uncle": "uncle 舅舅 叔叔 伯伯",
    "cousin": "cousin 表哥 表姐 表妹 表弟 堂哥 堂姐 堂妹 堂弟",
    "friend": "friend bestie bff buddy pal 朋友 闺蜜 好友 哥们",
    "roommate": "roommate flatmate housemate 室友",
    "boss": "boss manager supervisor 老板 领导 上司",
    "coworker": "coworker co-worker colleague 同事",
    "neighbor": "neighbor neighbour 邻居",
    "dog": "dog puppy pup doggo 狗 狗狗 小狗",
    "cat": "cat kitten kitty 猫 猫咪 小猫",
}.items():
    for _w in _words.split():
        _SUBJECT_CLASS[_w] = frozenset((_cls,))
for _w in ("parents", "folks", "父母", "爸妈"):
    _SUBJECT_CLASS[_w] = frozenset(("mother", "father"))
_PEOPLE_EN = sorted((w for w in _SUBJECT_CLASS if w.isascii()), key=len, reverse=True)
_PEOPLE_ZH = sorted((w for w in _SUBJECT_CLASS if not w.isascii()), key=len, reverse=True)
# English: a person after a possessive (up to two words between: "my old roommate kevin",
# "my little sister's"); a parent, a grandparent and a pet also bare ("mom's birthday",
# "we adopted a kitten").
_BARE_EN = "mom|mum|dad|grandma|grandpa|nana|dog|dogs|puppy|puppies|pup|cat|cats|kitten|kitty"
_SUBJECT_EN = re.compile(
    r"\b(?:(?:my|our|his|her|their|the|mom's|dad's)\s+(?:[a-z'-]+\s+){0,2}?"
    rf"({'|'.join(map(re.escape, _PEOPLE_EN))})(?:s|'s|s')?|({_BARE_EN}))\b",
    re.IGNORECASE,
)
# Chinese: the words wherever they are, longest first (男朋友 before 朋友), except where a
# single character is part of another word (空姐, 小姐, 哥们儿 is a friend; more in
# `_NOT_BEFORE`).
_SUBJECT_ZH = re.compile(
    r"(?<![空小])(?:" + "|".join(map(re.escape, _PEOPLE_ZH)) + r")(?![们儿子夫])"
)
# A single character inside another word: 大熊猫 and 猫眼 are no cat, 热狗 no dog, 帅哥 and
# 哥本哈根 no brother, 徒弟 no brother, 他妈的 no mother.
_NOT_BEFORE = {"猫": "熊", "狗": "热", "哥": "帅", "弟": "徒兄", "妈": "他"}
_NOT_AFTER = {"猫": "眼", "哥": "本伦"}
# The speaker as the subject: "i"/"we" (and their contractions), 我 not before someone of
# theirs (我妈, 我家猫 and 我的 name another's).
_SELF_EN = re.compile(r"\b(?:i|i'm|im|i've|ive|i'd|i'll|we|we're|we've)\b", re.IGNORECASE)
_SELF_ZH = re.compile(r"我(?!的|家|们的|" + "|".join(map(re.escape, _PEOPLE_ZH)) + ")")
SELF = "self"
_ONLY_SELF = frozenset((SELF,))


def names_someone(word: str) -> bool:
    """Is the word one for a person or a pet of the user's (mom, 狗狗, boss)?"""
    w = word.lower()
    return w in _SUBJECT_CLASS or w.rstrip("s") in _SUBJECT_CLASS


def _classes_zh(text: str) -> frozenset[str]:
    """The classes of the Chinese words for people and pets in the text, wherever they are
    (not a single character inside another word: 大熊猫, 帅哥)."""
    found: set[str] = set()
    if _HAS_CJK.search(text) is None:
        return frozenset()
    for m in _SUBJECT_ZH.finditer(text):
        before, after = text[m.start() - 1 : m.start()], text[m.end() : m.end() + 1]
        word = m.group()
        if (before and before in _NOT_BEFORE.get(word, "")) or (
            after and after in _NOT_AFTER.get(word, "")
        ):
            continue
        found |= _SUBJECT_CLASS[word]
    return frozenset(found)


def subjects(text: str) -> frozenset[str]:
    """The classes of the people and pets a statement names (`_SUBJECT_CLASS`), with
    `SELF` when the speaker is a subject too; `SELF` alone for the speaker's own news ("I
    moved to Lisbon"); empty when it names no one."""
    found: set[str] = set()
    for m in _SUBJECT_EN.finditer(text):
        word = (m.group(1) or m.group(2)).lower()
        if word == "folks" and m.group().lower().startswith("the"):
            continue  # "so the london folks can join": people, not the speaker's parents
        found |= _SUBJECT_CLASS.get(word, _SUBJECT_CLASS.get(word.rstrip("s"), frozenset()))
    found |= _classes_zh(text)
    speaker = _SELF_EN.search(text) is not None or _SELF_ZH.search(text) is not None
    if not found:
        return _ONLY_SELF if speaker else frozenset()
    if speaker:
        found.add(SELF)
    return frozenset(found)


def about_others(a: frozenset[str], b: frozenset[str]) -> bool:
    """Two statements about different people or pets: each names someone, and they name
    no one in common, the speaker included ("I moved to Lisbon" and "my brother just moved
    to Berlin"). Either side naming nobody, or the speaker beside someone ("I live with my
    roommate" and "moved in with my gf"), may still be the same fact."""
    if not a or not b:
        return False
    if a == _ONLY_SELF or b == _ONLY_SELF:
        return SELF not in (b if a == _ONLY_SELF else a)
    return SELF not in a and SELF not in b and not (a & b)


# Who a class of people is, where a pronoun can tell: "my daughter's recital is may 18,
# she's playing fur elise" speaks of the daughter only; "my wife is taking him to the game"
# may speak of the son.
_FEMALE = frozenset(("mother", "sister", "daughter", "grandmother", "aunt"))
_MALE = frozenset(("father", "brother", "son", "grandfather", "uncle"))
_PETS = frozenset(("dog", "cat"))
_MENTION_EN = re.compile(
    rf"\b({'|'.join(map(re.escape, _PEOPLE_EN))})(?:s|'s|s')?\b", re.IGNORECASE
)
_HE = re.compile(r"\b(?:he|him|his|he's|he'll|he'd)\b|他(?!们)", re.IGNORECASE)
_SHE = re.compile(r"\b(?:she|her|hers|she's|she'll|she'd)\b|她(?!们)", re.IGNORECASE)


def mentioned(text: str) -> frozenset[str]:
    """The classes of the people and pets the text speaks of, with a possessive or without
    ("Does your son play too?", "the son"), unlike `subjects`, which reads whose news a
    statement is."""
    found: set[str] = set()
    for m in _MENTION_EN.finditer(text):
        word = m.group(1).lower()
        found |= _SUBJECT_CLASS.get(word, frozenset())
    found |= _classes_zh(text)
    return frozenset(found)


# Someone no class holds, who may be the one asked about: "now the little guy has a fever
# too", "my eldest has strep", "the kids are both in the recital, my daughter on violin",
# "the big brother is so excited" (a son, of the baby to come), 老二也开始咳嗽了, 孩子他爸
# (the husband), 带娃. A review's probes (issue 40).
_UNCLASSED = re.compile(
    r"\b(?:bab(?:y|ies)|kids?|kiddos?|child|children|eldest|oldest|youngest|toddlers?|twins?|"
    r"boys|girls|teens?|teenagers?|newborn|grandkids?|grandchild(?:ren)?|grandsons?|"
    r"granddaughters?|step(?:son|daughter|mom|dad|kids?)|in-laws?|(?:mother|father|brother|"
    r"sister|son|daughter)s?-in-law|nephews?|nieces?|little (?:one|ones|guy|man|girl|boy)|"
    r"(?:other|middle|younger|older) one|"
    r"(?:the|a) (?:big|little|older|younger|baby) (?:brother|sister|bro|sis))\b|"
    r"孩子|娃|宝宝|宝贝|小宝|大宝|二宝|老大|老二|老三|老幺|小朋友|小家伙|双胞胎|侄子|侄女|"
    r"外甥|孙子|孙女|外孙|继子|继女|公公|婆婆|岳父|岳母|丈母娘|老丈人|嫂子|姐夫|妹夫|弟媳|"
    r"另一个|"
    # Someone described, not named by a relation: "the guy next door", "the lady downstairs".
    r"\b(?:guy|guys|lady|ladies|woman|women|man|men|dude|gal|someone|somebody|person|people)\b",
    re.IGNORECASE,
)
_CLASS_EN = "|".join(map(re.escape, _PEOPLE_EN))
_CLASS_ZH = "|".join(map(re.escape, _PEOPLE_ZH))
# Someone through another's relation: "my mom's sister" (an aunt), "my brother's wife", "her
# little brother" (a son, told by his sister), 她弟弟, 我妈的妹妹: the class says whose
# relation, not who.
_RELATION_OF = re.compile(
    rf"\b(?:his|her|their|(?:{_CLASS_EN})(?:'s|s'|’s))\s+(?:[a-z'-]+\s+){{0,2}}?(?:{_CLASS_EN})s?\b|"
    rf"[他她](?:的)?(?:{_CLASS_ZH})|(?:{_CLASS_ZH})的(?:{_CLASS_ZH})",
    re.IGNORECASE,
)


def names_unclassed(text: str) -> bool:
    """Does the text speak of someone no class holds (a baby, the kids, my eldest, 老二, 孩子)?
    Who that is cannot be told from the words."""
    return _UNCLASSED.search(text) is not None or _RELATION_OF.search(text) is not None


_SOMEONE_ELSE_TOO = re.compile(r"\b(?:also|too|as well|either)\b|也|又", re.IGNORECASE)


def someone_else_too(text: str) -> bool:
    """Does the text say that it holds for someone else as well ("and now leo has it too
    ugh", 老二也开始咳嗽了)? Looser than `adds_to`: "too" before a word counts."""
    return _SOMEONE_ELSE_TOO.search(text) is not None


def has_pronoun(text: str) -> bool:
    """Does the text speak of a third person by a pronoun (he, her, 他, 她)?"""
    return _HE.search(text) is not None or _SHE.search(text) is not None


# Words of a class that name no one: "that dad joke", "mother tongue".
_NOT_SOMEONE = re.compile(
    r"\bdad (?:jokes?|bod|vibes|hat|shoes)\b|\bmother (?:tongue|nature|board|ship|land)\b|"
    r"\b(?:baby|bridal) shower\b|\bpet peeves?\b",
    re.IGNORECASE,
)


def asked_about(question: str) -> frozenset[str]:
    """The classes of the people and pets a question asks about, besides the user
    (`subjects`, without the words of a class that name no one: "what was that dad joke?")."""
    return subjects(_NOT_SOMEONE.sub(" ", question)) - {SELF}


def speaks_of_others(asked: frozenset[str], text: str) -> bool | None:
    """Does the text speak only of people other than `asked` (True: "my sister's a nurse
    at mass general" for a question about the brother), or may it speak of them (False:
    it names them, or a pronoun that none it names can be: "my wife is taking him")? None
    when it names no one: who it is about is in the turns before it."""
    named = mentioned(text)
    if not named:
        return None
    if named & asked:
        return False
    if named & _PETS:  # "tons, she ignores them": a pet is a he or a she too
        return True
    for pronoun, gender in ((_HE, _MALE), (_SHE, _FEMALE)):
        if pronoun.search(text) is not None and not named & gender:
            return False
    return True


# A statement that adds to what was said, not replaces it: "turns out i'm also allergic to
# shellfish", "doc says i'm a bit gluten sensitive too", 又报了个普拉提, 我对猫毛也过敏.
_ADDS = re.compile(
    r"\b(?:also|as well|in addition|on top of that)\b|\btoo\b(?!\s+[a-z])|又|也(?!许)|另外|"
    r"再加上",
    re.IGNORECASE,
)


def adds_to(text: str) -> bool:
    """Does the statement say it comes in addition to something (also, too, 又, 也)?"""
    return _ADDS.search(text) is not None


# A question about how things were, not how they are: "what car did I have?", "where was I
# living last year?", 我以前住哪？ "did" only before a verb of a state ("did I have", "did I
# live"): with one of choosing it asks what was settled at last ("what name did we pick for
# the baby?" after "my husband vetoed it. it's gonna be nora"). "how old" stays a past: as
# a question about now it put "my wife's car is only 2 years old" above "my car is 12 years
# old" (a review's probe).
_ASKS_PAST = re.compile(
    r"\bdid\b(?=(?:\W+\w+){0,3}?\W+(?:have|own|live|stay|work|drive|use|go|attend|study|"
    r"grow|play|wear|feel|look|weigh)\b)|"
    r"\b(?:was|were|had|used to|ago|last (?:time|year|month|week|night)|before|"
    r"previously|previous|prior|former|ex|ex-\w+|originally|at first|back then|formerly|"
    r"old|first|earlier|yesterday)\b|"
    r"以前|之前|原来|当时|那时|上次|上回|第一次|最早|过去|曾经|去年|刚开始|一开始|本来|"
    # Not 早上一般 (the morning) nor 晚上个把小时.
    r"(?<![早晚])上(?:一(?:个|份|次|家|任|段|回|周|年|站|部|本)|个(?:月|星期|礼拜|周)|周)|"
    r"前男友|前女友|前任|前夫|前妻|小时候|昨天|前天",
    re.IGNORECASE,
)


def asks_about_now(question: str) -> bool:
    """Does the question ask how things stand (what phone do I have, 我现在住哪), rather
    than how they were? Every question that names no past does: a user asks most often
    about now."""
    return _ASKS_PAST.search(question) is None


# --------------------------------------------------------------------------- the user's own words
#
# A question about the user ("when do i usually work out?", 我早上一般喝点啥？) that does not
# ask what the assistant said ("what did you recommend?", 你推荐的那家叫什么？).
_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|im|i've|i'd|me|my|mine|myself|we|we're|our|ours|us)\b|我", re.IGNORECASE
)
_ASKS_ASSISTANT = re.compile(
    r"\b(?:you|u)(?:'ve| have| had)?\s+(?:\w+\s+){0,2}?(?:recommend|suggest|said|say|told|tell|"
    r"mention|propose|pick|book|found|find|gave|give|came up|list|wrote|write|think|thought|"
    r"advise)\w*|\b(?:your|ur) (?:recommendation|suggestion|advice|idea|pick|list|answer|tip|"
    r"rec)s?\b|你(?:\S{0,3})(?:推荐|建议|说|讲|提到|给我|帮我|列|写|觉得)|您|"
    r"(?:推荐|建议)的|跟我(?:说|讲|提)的",
    re.IGNORECASE,
)
# A turn whose last sentence asks: the reply after it answers it ("I'm going to Rome, what
# should I see?"), so the reply is the answer. Casual chat often drops the question mark
# ("should i park or use the cell phone lot"), so a last clause that opens like a question
# asks too.
_CLAUSES = re.compile(r"[.!?。！？\n]+")
_ASKS_EN = re.compile(
    r"^\W*(?:should|shall|can|could|would|will|do|does|did|is|are|was|were|what|where|when|how|"
    r"which|who|whom|why|any|anything|anyone|recommend|suggest|ideas?|recs?|"
    r"recommendations?|suggestions?)\b",
    re.IGNORECASE,
)
_ASKS_ZH = re.compile(
    r"什么|啥|哪|怎么|几|多少|要不要|是不是|能不能|可不可以|有没有|好不好|推荐|建议一下|求"
)


def asks_about_user(question: str) -> bool:
    """Does the question ask about the user (first person), not about what the assistant
    said?"""
    return _FIRST_PERSON.search(question) is not None and not asks_assistant(question)


def asks_assistant(question: str) -> bool:
    """Does the question ask what the assistant said ("what did you recommend?", 你推荐的)?"""
    return _ASKS_ASSISTANT.search(question) is not None


# What a reply may add to the turn before it: a number (九十天, 555-0142) or a name inside
# a sentence ("Hoshi Noodle Bar might be a fun pick").
_SPECIFIC = re.compile(
    r"\d+(?:[.:]\d+)?|[一二三四五六七八九十百千万两半]{2,}|"
    r"[一二三四五六七八九十百千万两半](?=[天个岁年月号点块元次周杯斤分])|"
    r"(?<![.!?]\s)(?<=\s)[A-Z][A-Za-z'-]+"
)


# A question for a number: how much, how many, a price, 多少, 几个.
_ASKS_AMOUNT = re.compile(
    # Not how much one likes something ("how much do i like my new job?").
    r"\bhow (?:much|many|old|far|long)\b(?! (?:do|does|did) \w+ (?:like|love|enjoy|hate|"
    r"care|mind|miss)\b)|\b(?:cost|costs|price)\b|"
    # What is told in figures ("what dose of zoloft", "the gate code", "tire psi"), when it
    # is what is asked: not a kind of thing ("code editor", "budget airline", "which pin
    # did she buy", "dress code").
    r"(?<!dress )\b(?:dose|dosage|temp|temperature|psi|salary|premium|budget|number|"
    r"code(?! of conduct)|pin)"
    r"(?=\s+(?:of|for|at|on|in|to|now|again|these|this|last|then)\b|\s*[?？.!]*\s*$)|"
    r"\bquoted? (?:me|us|him|her|them)\b|\bwhat (?:temp|temperature|dose|dosage|psi)\b|"
    # A reading, not a medicine for it ("my blood pressure med", 血压药).
    r"(?<!\bfor )(?<!\bfor my )\bblood pressure\b(?! (?:med|meds|medication|medications|"
    r"medicine|pills?|tablets?|drugs?|cuff|monitor)\b)|"
    r"(?:血压|血糖|体温|心率|胆固醇)(?![药计仪])|"
    r"多少|(?<![很好许])多(?:大|久|远|高|重)|(?<![哪这那前过好])几(?:个|天|次|岁|年|周|斤|块|公里|层|楼|只|口|张|晚|"
    r"杯|瓶|顿|节|遍|套|件|辆|台|本|双|位|页|米)|"
    r"价格|价钱|几片",
    re.IGNORECASE,
)
# A number: digits, or Chinese numerals of two or more, or one before a unit.
# ("千万别", "万一", "一个人", "半天", "the one on main st" are no amounts.)
_NUMBER = re.compile(
    r"\d|(?<![万千])[一二三四五六七八九十两][一二三四五六七八九十两百千万]+|"
    r"(?<![万千])[一二三四五六七八九十两](?=[块元岁号点天周斤层楼只次片杯瓶顿节遍辆台双]|年级)|"
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|twenty|thirty|"
    r"forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|dozen|couple|half|twice)\b",
    re.IGNORECASE,
)


# A reply that opens with a yes or a no: it answers a yes/no question, whose content is the
# question's ("Want to try the hot pot there?" / "对，主要想吃火锅").
_AFFIRMS = re.compile(
    r"^\W*(?:(?:yes+|yeah|yep|yup|ya|yea|no|nope|nah|sure|ok|okay|definitely|exactly)\b|"
    r"(?:对|是的|是啊|嗯+|好的?|不是|没有|当然)(?=[，,。.!！~\s]|$))",
    re.IGNORECASE,
)


def affirms(text: str) -> bool:
    """Does the reply open with a yes or a no (yeah, nope, 对, 是的, 不是)?"""
    return _AFFIRMS.search(text) is not None


# A question for a name ("what are my fish called?", 我的仓鼠叫什么？) and a text that gives
# one ("two goldfish, named salt and pepper", 一只叫豆豆).
_ASKS_NAME = re.compile(r"\bname[sd]?\b|\bcalled\b|叫什么|叫啥|名字|姓什么|姓啥", re.IGNORECASE)
# "who" asks for someone, by name or not ("who's my guitar teacher now", 读书会在谁家？).
_ASKS_WHO = re.compile(r"\bwho(?:'s|’s|se|s|m)?\b|谁", re.IGNORECASE)
_NAMES_NAME = re.compile(
    r"\b(?:named|name is|name's|names are)\b|叫(?![了车醒外])|名字|"
    r"(?<![.!?]\s)(?<=\s)[A-Z][a-z]+|"
    # A title before a name, capitalised or not ("dr okafor", "ms. delgado").
    r"(?i:\b(?:dr|mr|mrs|ms|prof)\.?\s+(?!(?:said|says|told|tells|wants|thinks|gave|put|"
    r"called|recommended|appointment|appt|visit|office|word|excel|is|was|and|or|to|at|for|"
    r"the|on|in|if)\b)[a-z]{2,})"
)


def asks_name(query: str) -> bool:
    """Does the question ask for a name ("what's my dog called?", 叫什么)?"""
    return _ASKS_NAME.search(query) is not None


def asks_who(query: str) -> bool:
    """Does the question ask who ("who's my guitar teacher now", 谁)?"""
    return _ASKS_WHO.search(query) is not None


def names_name(text: str) -> bool:
    """Does the text give a name ("named salt", 叫豆豆, a capitalised word inside it)?"""
    return _NAMES_NAME.search(text) is not None


# A time told as a detail ("thurs 7ish", "after work tmrw", 周六早上八点半): a day, a part
# of one, a date or a clock time; not any number ("found 2 cavities") nor "last time".
_WHEN_DETAIL = re.compile(
    r"\b(?:today|tonight|tomorrow|tmrw|tmr|yesterday|morning|afternoon|evening|noon|"
    r"midnight|weekends?|(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?|tues|weds|"
    r"thu|thur|thurs|fri|january|february|april|june|july|august|september|october|"
    r"november|december|next (?:week|month|year)|\d{1,2}(?::\d{2})?\s*(?:am|pm|ish|o'clock)|"
    r"\d{1,2}:\d{2}|\d{1,2}(?:st|nd|rd|th))\b",
    re.IGNORECASE,
)


def names_when(text: str) -> bool:
    """Does the text tell a time as a detail (a day, a date, a clock time)?"""
    return _WHEN_DETAIL.search(text) is not None or (
        _HAS_CJK.search(text) is not None and _NAMES_TIME_ZH.search(text) is not None
    )


# Times that name no day: 最近 ("recently"), 以前, 的时候.
_VAGUE_TIME_ZH = frozenset(("最近", "刚才", "以前", "之前", "之后", "以后", "的时候"))


def names_day(text: str) -> bool:
    """Does the text tell which day (or date, or clock time), not only "recently" (孩子
    最近报了个钢琴班 tells no day for 钢琴课是周几上的)?"""
    if _WHEN_DETAIL.search(text) is not None:
        return True
    if _HAS_CJK.search(text) is None:
        return False
    return any(m.group(0) not in _VAGUE_TIME_ZH for m in _NAMES_TIME_ZH.finditer(text))


# A reply that answers nothing yet ("还没想好", "not sure yet", "idk"): what was asked is
# still open.
_UNDECIDED = re.compile(
    r"还没(?:想好|定|决定|确定)|没想好|不知道|不确定|不清楚|再说吧|都还好|都没事|没(?:有)?别的|"
    r"\b(?:not sure|no idea|haven't decided|havent decided|not decided|undecided|dunno|idk|"
    r"tbd|no clue|don't know|dont know|nothing else|that's it|that's all)\b",
    re.IGNORECASE,
)
# The assistant offering to do something ("Want me to remind you a few days before?",
# 要不要我帮你列个清单？): the reply takes up the offer, it tells nothing asked about.
_OFFERS = re.compile(
    r"\b(?:want me to|should i|shall i|would you like me to|do you want me to|need me to|"
    r"can i help|like me to)\b|需要我|要不要我|要我帮|我帮你|我可以帮",
    re.IGNORECASE,
)


def offers(text: str) -> bool:
    """Does the assistant's turn offer to do something?"""
    return _OFFERS.search(last_clause(text)) is not None


def last_clause(text: str) -> str:
    """The turn's last sentence that holds a word ("Are you looking for road or trail?"
    of "Sizing varies a lot between brands. Are you looking for road or trail?")."""
    return next((c for c in reversed(_CLAUSES.split(text)) if c.strip()), "")


_AFTER_QUESTION = re.compile(r"(?<=[?？])\s*")


def asked_in(text: str) -> str | None:
    """What the assistant's turn asks, if it asks and offers nothing: its last sentence
    ("Sizing varies a lot between brands." is no question about the size), or its last
    question when one short sentence follows it, as assistants explain why they ask
    ("What's she studying? That changes what she needs.")."""
    if ends_asking(text):
        return None if offers(text) else last_clause(text).strip()
    *head, tail = _AFTER_QUESTION.split(text.strip())
    if not head or len(_CLAUSES.split(tail.strip(" .!。！"))) > 1 or len(tail) > 80:
        return None
    asked = "".join(head)
    return None if offers(asked) else last_clause(asked).strip()


_ASKS_CLOCK = re.compile(r"\bwhat time\b|几点|什么时间", re.IGNORECASE)
_ASKS_DAY = re.compile(
    r"\b(?:what|which) (?:day|date|weekend)\b|哪天|哪一天|哪几天|几号|星期几|周几|礼拜几|哪个周末",
    re.IGNORECASE,
)


_ASKS_DURATION = re.compile(r"\bhow long\b|多久(?!一次)|多长时间|多长", re.IGNORECASE)
_ASKS_OFTEN = re.compile(r"\bhow often\b|多久一次|几天一次", re.IGNORECASE)
# How often: "once a week", "every other week", "three times a day", "mondays and
# thursdays", 每周两次, 一天三次.
_OFTEN = re.compile(
    r"\b(?:once|twice|\w+ times|every|daily|weekly|monthly|nightly|each|"
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)days)\b|"
    r"每(?:天|日|周|星期|礼拜|月|年|晚|早)|[一两二三四五六七八九十\d]+次",
    re.IGNORECASE,
)


def names_often(text: str) -> bool:
    """Does the text tell how often ("once a week", 每周两次)?"""
    return _OFTEN.search(text) is not None


_CLOCK = re.compile(
    r"\b\d{1,2}(?::\d\d)?\s*(?:am|pm|ish|o'clock)\b|\b\d{1,2}:\d\d\b|"
    r"[0-9０-９一二三四五六七八九十两]{1,3}点",
    re.IGNORECASE,
)


def names_clock(text: str) -> bool:
    """Does the text name a clock time ("6:40am", 7点)?"""
    return _CLOCK.search(text) is not None


# What may tell a time where the tests above see none: a part of the day (睡前, "before
# bed"), "at 9", a month shortened or ambiguous before a day ("aug 2", "may 3"), a quarter,
# the lunar calendar (腊月初八); and a number in Chinese numerals before a measure word
# (两顿, 八个, 五公里). Loose on purpose: they only keep results (`may_tell`).
_MAY_TELL_TIME = re.compile(
    r"睡前|饭前|饭后|起床|下班|上班|放学|腊月|正月|初[一二三四五六七八九十]|[年月](?:初|中|底)|"
    r"满月|周岁|"
    r"\b(?:before|after|once|until|till) (?:the |my |our |he |she |they |we |i )?\w+|"
    r"\b(?:bedtime|lunchtime|dinnertime|payday|sunrise|sunset|dawn|dusk|noon\w*|"
    r"overnight|fortnight)\b|\bat (?:lunch|dinner|breakfast|night)\b|"
    r"\b(?:at|by|around|until|til|till|to|from|about) (?:\d|(?:one|two|three|four|five|six|"
    r"seven|eight|nine|ten|eleven|twelve)\b)|\bhalf (?:past )?(?:\w+)\b|\bq[1-4]\b|"
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)[ -]"
    r"(?:thirty|fifteen|forty[ -]five|o'clock)\b|"
    r"\bon the (?:first|second|third|\w+th)\b|"
    # A year not naming a model ("in 2019", "graduated 2019", "class of '19"; not "2016
    # rav4"), a date in figures (6/14/19, 2025-06-07, 14.06.2019).
    r"\b(?:in|since|of|from|until|by|around) '?\d\d\b|\b(?:19|20)\d\d\b(?!\s*[a-z0-9])|"
    r"\b\d{1,4}[/.-]\d{1,2}(?:[/.-]\d{2,4})?\b|"
    r"\b(?:during|in) (?:college|high school|school|uni|university|grad school|the pandemic|"
    r"covid|lockdown)\b|"
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|march)\.? ?\d{1,2}\b",
    re.IGNORECASE,
)
# Counts in words: "both of my kids", twins, a pair, "a grand", none ("i'm an only child",
# "no pets"), 俩, 仨, 一对, 双胞胎, 独生, 十来个.
_MAY_TELL_AMOUNT = re.compile(
    r"[0-9０-９]|[一二三四五六七八九十两百千万半几]"
    r"(?:个|顿|次|天|晚|人|口|张|节|遍|瓶|杯|米|克|分|斤|块|元|岁|号|点|周|年|月|只|片|层|楼|"
    r"公里|对|来|多|室|厅|居|卧)|俩|仨|双胞胎|独生|独苗|满月|周岁|半百|免费|白送|不要钱|没花钱|"
    # An age told by the zodiac year or the school a child starts (儿子属龙的，明年上小学).
    r"属[鼠牛虎兔龙蛇马羊猴鸡狗猪]|上(?:小学|初中|高中|大学|幼儿园|托班|小班|中班|大班)|"
    r"\b(?:both|twins?|triplets|quadruplets|pairs?|grand|fortnight|overnight|none|zero|"
    r"decades? (?:old|ago|long|now)|alone|nothing|newborn|single|free|only child|just me|"
    r"(?:twen|thir|for|fif|six|seven|eigh|nine)ties)\b|\bno [a-z]+s\b",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
# A question for a size ("what size shoe does dad wear", "furnace filter size?", 床垫多大,
# 穿几码; not an age, 豆豆多大了) and what may tell one besides a number: "queen", "a
# medium", XL, 大号, L码.
_ASKS_SIZE = re.compile(
    r"\bwhat\s+(?:[\w'’-]+\s+)?sizes?\b|\bsizes?\s*[?？.!]*\s*$|尺码|尺寸|几码|"
    r"多大(?!年纪|岁|了|年龄)",
    re.IGNORECASE,
)
_TELLS_SIZE = re.compile(
    r"\b(?:x+s|x+l|\d?xl|small|medium|large|petite|queen|king|twin|full|regular|wide|"
    r"narrow|one size|tall|grande|venti|trenta|short|kids?|toddler|youth|junior)\b|"
    r"\b(?:size|sz)\s+[smlx]+\b|[大中小]号|[SMLX]+码|均码|加大",
    re.IGNORECASE,
)


def asks_size(question: str) -> bool:
    """Does the question ask for a size (of shoes, a ring, a bed, a filter)?"""
    return _ASKS_SIZE.search(question) is not None


def may_tell(text: str, *, time: bool, amount: bool, size: bool = False) -> bool:
    """Could the text tell the time (`time`) or the number (`amount`) a question asks for?
    Loose, for the opposite: when none of a recall's results could, the question asks
    about something never said ("when is my husband's birthday?" over "gift ideas for my
    husband?", 我家猫几岁了 over 我家猫最近掉毛厉害). A bare number is no time ("2016 rav4,
    98k miles" tells no due date), but is a number. A size (`size`) is told in numbers
    or in words ("queen", XL, 大号)."""
    if size and _TELLS_SIZE.search(text) is not None:
        return True
    if (amount or size) and (names_amount(text) or _MAY_TELL_AMOUNT.search(text) is not None):
        return True
    if not time:
        return False
    return (
        names_when(text)
        or names_often(text)
        or _MAY_TELL_TIME.search(text) is not None
        or names(_DIGITS.sub(" ", text), "time")
    )


def time_asked(text: str) -> Literal["clock", "day", "duration", "often"] | None:
    """Which time a question asks for: a clock time ("what time", 几点), a day ("which
    day", 哪天), a duration ("how long", 多久) or how often; None when it does not say."""
    if _ASKS_CLOCK.search(text) is not None:
        return "clock"
    if _ASKS_OFTEN.search(text) is not None:
        return "often"
    if _ASKS_DURATION.search(text) is not None:
        return "duration"
    return "day" if _ASKS_DAY.search(text) is not None else None


_TO_YOU = re.compile(
    r"\b(?:your|yours|ur|yourself|(?:how|what) about you|and you)\b|你的|您的|你呢|那你|你自己",
    re.IGNORECASE,
)


def addressed_to_you(text: str) -> bool:
    """Does the text speak of the one it is said to ("What's your name?", 那你呢？)?"""
    return _TO_YOU.search(text) is not None


def shows_case(text: str) -> bool:
    """Would a place or a name show in the text: Chinese, or Latin letters written with
    capitals (not "airbnb in alfama, host is called rui")?"""
    return _HAS_CJK.search(text) is not None or any(c.isupper() for c in text)


# A question for a thing by what it is called ("what robot vacuum", "Which couch is it?",
# 什么书, 哪款, 买了啥): not for a time, a place, an amount, a reason ("what made you …"),
# nor "what is it about".
_ASKS_WHICH = re.compile(
    r"\b(?:what|which)(?:'s| is| are| was)?(?: the| your| his| her| their)? (?!(?:is|was|are|"
    r"were|do|did|does|will|would|can|could|should|made|makes|happened|happens|about|else|"
    r"if|you|your|i|we|he|she|they|it|time|day|date|year|month|days|for|to|a|an)\b)[a-z]+|"
    r"(?<!为)什么(?!时候|时间|地方)|啥(?!时候)|"
    r"哪(?:个|款|家|种|本|部|所|只|位|件|双|辆|条|门|户|首|些|样|类|型)",
    re.IGNORECASE,
)


def asks_which(text: str) -> bool:
    """Does the text ask for a thing by what it is ("哪款？", "what book did he recommend")?"""
    if _ABOUT_END.search(text) is not None:  # "What's the email about?": its topic
        return False
    return _ASKS_WHICH.search(text) is not None


_ABOUT_END = re.compile(r"\babout\W*$", re.IGNORECASE)


def has_cjk(text: str) -> bool:
    """Does the text hold a Chinese character?"""
    return _HAS_CJK.search(text) is not None


def undecided(text: str) -> bool:
    """Does the reply say it does not know, has not decided yet, or that there is nothing
    more ("别的好像都还好")?"""
    return _UNDECIDED.search(text) is not None


def asks_amount(query: str) -> bool:
    """Does the question ask for a number ("how much", "how many", 多少, 几天)?"""
    return _ASKS_AMOUNT.search(query) is not None


def names_amount(text: str) -> bool:
    """Does the text name a number (230, 十五, 三天, "two")?"""
    return _NUMBER.search(text) is not None


def adds_specifics(reply: str, turn: str) -> bool:
    """Does the reply name a number or a name the turn before it does not? Then it states
    something of its own ("太平洋那款的等待期是九十天"), not only a reaction to the turn."""
    said = turn.lower()
    return any(m.group().lower() not in said for m in _SPECIFIC.finditer(reply))


def ends_asking(text: str) -> bool:
    """Does the turn end with a question (marked, or a last clause that opens like one or
    asks for something: "recs for rome pls", 推荐个餐厅)? The end is read backwards over
    what is not a word, in linear time (a pattern for it backtracked on long runs of
    punctuation and spaces)."""
    end = len(text)
    while end and not text[end - 1].isalnum():
        if text[end - 1] in "?？":
            return True
        end -= 1
    if end and text[end - 1] in "吗嘛":
        return True
    last = next((c for c in reversed(_CLAUSES.split(text)) if c.strip()), "")
    return _ASKS_EN.search(last) is not None or _ASKS_ZH.search(last) is not None


# A question that asks for advice or a suggestion, whose answer is the assistant's reply.
_ASKS_ADVICE = re.compile(
    r"\b(?:should|recommend\w*|suggest\w*|ideas?|tips?|advice|what can i|how (?:do|can|should)"
    r" i|how to)\b|建议|推荐|怎么办|该怎么|如何|怎么(?:做|弄|处理)",
    re.IGNORECASE,
)
# Where a turn's statement ends and its question begins: a sentence's end or a comma.
_PARTS = re.compile(r"[,，.!?。！？;；\n]+")
_WORD = re.compile(r"[A-Za-z0-9]+")


# A question for a grade or a level, and what tells one: a level in figures ("四级", "B1",
# "3rd grade", N2) or in words ("intermediate", 中级, KET, kindergarten). Not a number
# question: "what level is my french class?" over "it's intermediate" must not come back
# empty for want of a figure (`may_tell`), nor take "there are 12 people in it" for one.
_ASKS_LEVEL = re.compile(
    r"\bwhat (?:\w+ )?(?:grade|level)\b|几级|什么级别|哪个级别|几段", re.IGNORECASE
)
_NAMES_LEVEL = re.compile(
    r"(?<![A-Za-z])(?:[abc][12]|n[1-5]|hsk ?\d|(?:level|grade|lvl|band|year) ?\d+|"
    r"\d+(?:st|nd|rd|th)? grade|beginners?|intermediate|advanced|elementary|kindergarten|"
    r"pre-?k|freshman|sophomore|junior|senior|ket|pet|fce)(?![A-Za-z])|"
    r"[一二三四五六七八九十\d]+[级段]|初级|中级|高级|入门|幼儿园|大班|中班|小班",
    re.IGNORECASE,
)


def asks_level(question: str) -> bool:
    """Does the question ask for a grade or a level ("what ballet grade …", 考几级)?"""
    return _ASKS_LEVEL.search(question) is not None


def names_level(text: str) -> bool:
    """Does the text name a grade or a level (四级, B1, "3rd grade", intermediate)?"""
    return _NAMES_LEVEL.search(text) is not None


# A Chinese question for a place by what it is (哪个酒店, 哪家火锅, 哪所学校), not for a city
# or a country; and a place named at that level: a street, a building, a venue.
_ASKS_VENUE_ZH = re.compile(r"哪(?:个|家|所|间)(?!城市|国家|省|州|地方)")
_NAMES_VENUE_ZH = re.compile(
    _NOT_ROADS
    + r"[\u4e00-\u9fff](?:路|街|道|巷|号楼|大厦|广场|中心|酒店|宾馆|民宿|饭店|餐厅|医院|诊所|"
    r"学校|大学|小学|中学|幼儿园|学院|小区|商场|健身房|公园|银行|超市|公司|楼|层|店)|"
    # what was booked or stayed at, often a brand (订了亚朵, 住的是全季)
    r"(?:订了|订的|住在|住的是|住进了?)(?![个一这那])[\u4e00-\u9fffA-Za-z]{2}"
)


def asks_venue_zh(question: str) -> bool:
    """Does the (Chinese) question ask for a place by what it is (我出差住哪个酒店)?"""
    return _ASKS_VENUE_ZH.search(question) is not None


def names_venue_zh(text: str) -> bool:
    """Does the Chinese text name a place at the level of a venue (not only 杭州, a city)?"""
    return _NAMES_VENUE_ZH.search(text) is not None


def asks_advice(question: str) -> bool:
    """Does the question ask for advice (should, recommend, 建议, 怎么办)?"""
    return _ASKS_ADVICE.search(question) is not None


def tells_then_asks(text: str) -> bool:
    """Does a turn that ends asking first tell something of its own ("i'm on lisinopril
    for blood pressure, is it ok to take ibuprofen?", 我用的是iPhone 13，电池健康只有81%了，
    要不要换): a part before the question that does not ask, of four Chinese characters or
    two words that are not a reaction's ("thanks so much")?"""
    parts = [p.strip() for p in _PARTS.split(text) if p.strip()]
    return any(_tells(told) for told in parts[:-1])


def _tells(part: str) -> bool:
    if _ASKS_EN.search(part) is not None or _ASKS_ZH.search(part) is not None:
        return False
    if filler("user", part):
        return False
    words = [w for w in _WORD.findall(part) if w.lower() not in _OPENERS and w.lower() != "much"]
    return len(words) + sum(len(run) for run in _CJK.findall(part)) / 2 >= 2


def asks_plainly(text: str) -> bool:
    """Is the turn plainly a question: marked with a question mark? Stricter than
    `ends_asking`, whose last clause may open like one in a statement ("i'm lactose
    intolerant"; 几 in 玩几天) and which reads "which reminds me, …" as asking."""
    return text.rstrip().endswith(("?", "？"))


# A user's question about themself that tells nothing of its own ("Where do I live again?",
# "what's my blood type?", 我住在哪里？): the user asks to be reminded. Stored as a turn, it
# matches the same question asked later better than the answer does, and its words, as the
# next turn's terms, made the turn before it ("我下个月要去柏林出差。") answer "Where do I
# live?" (`reminds`).
_REMIND_OPENER = r"^\W*(?:(?:wait|hey|so|ok|okay|btw|um|uh|oh|hmm|sorry)\W+)?"
_REMIND_EN = re.compile(
    _REMIND_OPENER
    + r"(?:(?:what|where|when|which|who|whose)(?:'s|’s|s)?|how (?:many|much|old|long|far))"
    r"(?:\s+[\w'’-]+){0,3}?\s+(?:"
    # ... is my X, ... did i / do i / am i VERB ("which gym did i join?", "whos my dentist")
    r"(?:is|are|was|were|'s|’s|do|does|did)\s+(?:my|our)|"
    r"(?:did|do|am|are|were|have|had)\s+(?:i|we)\b(?!\s+do\b)"
    r")|" + _REMIND_OPENER + r"(?:what|where|when|which|who)(?:'s|’s|s)\s+(?:my|our)\b",
    re.IGNORECASE,
)
_HOW_TO = re.compile(r"\bdo (?:i|we)\b(?! have\b)", re.IGNORECASE)
# 我住在哪里？ 我的血型是什么？ 我家猫几岁了？: not advice (该, 能, 要不要) nor why (为什么, 怎么).
_REMIND_ZH = re.compile(
    r"^我(?!.*(?:该|能|要不要|可以|好不好|适合|为什么|怎么|为啥))[^，,。！!？?]{0,10}"
    r"(?:什么|啥|哪|几|多少|谁)[^，,。！!]{0,6}[？?]\s*$"
)


def reminds(role: str | None, text: str) -> bool:
    """Is the turn a user's question about themself that tells nothing: a question ("Where
    do I live again?", 我的血型是什么？) in the first person, asking a fact, not advice ("what
    should i get my husband?") nor what the assistant said, with no number, no name inside
    and no statement before it ("i'm on lisinopril, what dose …")?"""
    t = text.strip()
    if role != "user" or not asks_plainly(t) or not asks_about_user(t):
        return False
    if asks_advice(t) or tells_then_asks(t) or any(ch.isdigit() for ch in t):
        return False
    if any(m.group(1) not in _NOT_NAMES for m in _NAME_INSIDE.finditer(t)):
        return False
    if _REMIND_ZH.search(t) is not None:
        return True
    words = _WORD.findall(t)
    # "how long do i boil an egg?" asks how to, "how many kids do i have?" what is.
    first = _WORD.findall(re.sub(_REMIND_OPENER, "", t, flags=re.IGNORECASE))[:1]
    how_to = first in (["how"], ["How"]) and _HOW_TO.search(t) is not None
    return len(words) <= 9 and not how_to and _REMIND_EN.search(t) is not None


def names_speaker(query: str, speaker: str) -> bool:
    """Does the query name the speaker: as a whole word, case aside (a Chinese name, which
    has no word boundaries, anywhere in it)?"""
    if _CJK.search(speaker):
        return speaker in query
    pattern = rf"(?<!\w){re.escape(speaker)}(?!\w)"
    return re.search(pattern, query, re.IGNORECASE) is not None


# --------------------------------------------------------------------------- changes


@dataclass(frozen=True, slots=True)
class Statement:
    """What change promotion needs of a ranked result."""

    created_at: float  # epoch seconds
    changes: bool  # `states_change` of its text


def promote_changes(items: Sequence[Statement], similar: Callable[[int, int], bool]) -> list[int]:
    """A new order (indices into `items`, best first): each result that states a change
    moves just above the highest-ranked *older* result it is `similar` to — the statement
    it most likely replaces. `similar(i, k)` is asked only for k < i: a result is compared
    with the ones ranked above it (results are moved in index order, so a result's
    neighbours above are always among the lower indices)."""
    order = list(range(len(items)))
    for i, item in enumerate(items):
        if not item.changes:
            continue
        pos = order.index(i)
        for p in range(pos):
            k = order[p]
            if items[k].created_at < item.created_at and similar(i, k):
                order.insert(p, order.pop(pos))
                break
    return order


def similar_by_vectors(
    unit: Callable[[int], NDArray[np.float32] | None], min_similarity: float
) -> Callable[[int, int], bool]:
    """`promote_changes`'s `similar` over unit turn vectors (`unit(i)`: result i's, or None;
    a callable, so that only the vectors a comparison reads are built): a cosine of at
    least `min_similarity`; a result without a vector is similar to none."""

    def similar(i: int, k: int) -> bool:
        a, b = unit(i), unit(k)
        return a is not None and b is not None and float(a @ b) >= min_similarity

    return similar


# A user id that is a name ("ana", "Lena"): letters only, from two (not "u1", "user-42"),
# and not a word for a user or a placeholder ("user", "test", "default", "me").
_NAME_ID = re.compile(r"[A-Za-z]{2,}")
_NOT_NAME_WORDS = (
    "user users test tester demo admin default guest anonymous anon system assistant bot "
    "client customer member owner someone somebody person human agent example sample "
    # Capitalised as words too: "May I…", "in June", "on Sunday".
    "may might must shall january february march april june july august september october "
    "november december monday tuesday wednesday thursday friday saturday sunday"
)
_NOT_NAME_IDS = frozenset(_NOT_NAME_WORDS.split())


def in_first_person(query: str, user_id: str) -> str:
    """The question with the user named by their id put in the first person: an agent
    asks "Ana 住在哪里？" or "What does Ana eat?" of user "ana", whose turns say I and my,
    and whose profile says "the user". Only where the name stands for a person on its own
    (`_names_the_user`): capitalised in English, any case in a Chinese question; not inside
    another word or name ("Tomás", "Grace Hopper", "Ivy League", "iPhone Pro Max"), not a
    place or a thing ("a trip to Sofia", "her Mercedes", "the Summer holidays", 我妈用的 nova),
    not someone else of that name ("my friend Maria"). "Ana's" becomes "my", "Ana" I (我 in a
    Chinese question)."""
    low = user_id.lower()
    if _NAME_ID.fullmatch(user_id) is None or low in _NOT_NAME_IDS:
        return query
    if low in terms.ENGLISH_STOPWORDS:  # "me", "i", "you"
        return query
    chinese = has_cjk(query)
    lead = len(query) - len(query.lstrip())  # where the text's first word starts
    pattern = re.compile(
        rf"(?<![^\W\d_\u3400-\u9fff]|[\d_'’-]){re.escape(user_id)}"
        rf"(?P<own>['’]s|['’](?=\s))?(?![^\W\d_\u3400-\u9fff]|[\d_-])(?P<gap>\s*)",
        re.IGNORECASE,
    )

    def own(m: re.Match[str]) -> str:
        if not _names_the_user(query, m, len(user_id), chinese=chinese, lead=lead):
            return m.group(0)
        if chinese:  # "Ana 住在哪里" → 我住在哪里
            return "我的" if m.group("own") else "我"
        return ("my" if m.group("own") else "I") + m.group("gap")

    return pattern.sub(own, query)


# Before a name, words that make it a place, a thing or someone else: "to Sofia", "her
# Mercedes", "the Summer holidays", "my friend Maria" (a possessive two words back).
_NOT_THE_USER_BEFORE = re.compile(
    r"\b(?:to|in|from|at|near|of|for|with|about|by|on|the|a|an|this|that|my|his|her|our|"
    r"their|your|its)\W*$|"
    r"\b(?:my|his|her|our|their|your)\s+\w+\W*$|的\s*$",
    re.IGNORECASE,
)
_CAPITALISED = re.compile(r"[A-Z][a-z]")


def _names_the_user(query: str, m: re.Match[str], size: int, *, chinese: bool, lead: int) -> bool:
    """Does the match stand for the user: written as a name, and not part of a longer name
    or a place or a thing (`in_first_person`; `lead`: where the text's first word starts)?
    Read from a few words around it only, so that a long text of many names costs time in
    proportion to its length."""
    word = query[m.start() : m.start() + size]
    if size > 1 and word.isupper():  # "AI", "MAX"
        return False
    # Lowercase, only as a Chinese question's first word ("lina 在哪里上班？", not "我想买
    # max 版的" nor "我用ai写的文章").
    if not word[0].isupper() and not (chinese and m.start() <= lead):
        return False
    at = max(lead, m.start() - _NEAR)
    before, after = query[at : m.start()], query[m.end() : m.end() + _NEAR]
    if _NOT_THE_USER_BEFORE.search(before):
        return False
    if m.group("gap") and _CAPITALISED.match(after):  # "Grace Hopper", "Ivy League"
        return False
    if m.start() <= lead and after.startswith((",", "，")):  # "Tom, where do I live?"
        return False
    # After a capitalised word inside a sentence: "iPhone Pro Max", "Mary Grace".
    prev = re.search(r"(\S+)\s+$", before)
    if prev is None or not _CAPITALISED.match(prev.group(1)):
        return True
    earlier = before[: prev.start()].rstrip()
    if not earlier:
        return at + prev.start() <= lead  # the text's first word ("Does Ana …") or cut off
    return (
        earlier.endswith((".", "!", "?", ":", "。", "？", "！", "："))
        or "\n" in before[len(earlier) :]
    )


# How far around a name `_names_the_user` reads.
_NEAR = 48
