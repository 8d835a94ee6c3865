"""Offline extraction (docs/facts.md, "Without an LLM"): entities, relations and profile
facts from one user turn by patterns alone, English and Chinese, no I/O.

Precision first: only first-person statements ("my sister Clara", "I live in", "我对花生过敏")
and what the same turn says of a person it introduced ("Clara lives in Toronto") become
relations; a question, a wish or plan ("if I moved to…", "我打算…"), a negation ("I don't live
in…"), somebody else's words ("she said…") yield nothing. The words recognised are in
app/core/patterns.py; how well each kind does is measured by bench/extraction.py.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from app.core import patterns as p
from app.core.graph import name_key

USER = "user"  # the user's own node, as the LLM path and callers name it

# Relations that hold one value at a time: a newer statement ends the older one.
SINGLE_VALUED = frozenset({"lives_in", "works_at", "works_as", "diet"})

# Every kind a relation or mention can have, in the order the bench reports them.
KINDS = (
    "family",
    "people",
    "residence",
    "origin",
    "work",
    "study",
    "diet",
    "allergy",
    "pet",
    "language",
    "preference",
    "others",
    "alias",
    "mentions",
)
# On unless a setting says otherwise: every relation kind, each at precision >= 0.9 on
# bench/extraction.py's labelled turns (bench/README.md, "Offline graph extraction"). Free
# mentions (a capitalised word or a jieba name tag that no relation names) are off: 0.88 on
# the held-out turns when first measured, and a junk entity per imperative ("book Nobu").
DEFAULT_KINDS = tuple(k for k in KINDS if k != "mentions")


_FAMILY = frozenset({*p.FAMILY_EN.values(), *p.FAMILY_ZH.values()})
_PEOPLE = frozenset({*p.PEOPLE_EN.values(), *p.PEOPLE_ZH.values()})
_KIND_OF = {
    "lives_in": "residence",
    "from": "origin",
    "works_at": "work",
    "works_in": "work",
    "works_as": "work",
    "studies_at": "study",
    "studies_in": "study",
    "diet": "diet",
    "avoids": "diet",
    "allergic_to": "allergy",
    "owns": "pet",
    "speaks": "language",
    "learning": "language",
    "likes": "preference",
    "prefers": "preference",
    "dislikes": "preference",
}


def kind_of(subject: str, predicate: str) -> str:
    """A relation's kind (the unit the bench measures and the setting switches on): what
    the user says of themselves by its predicate; what the turn says of another person is
    "others"; a second name for someone is "alias"."""
    if predicate == "also_known_as":
        return "alias"
    if subject != USER:
        return "others"
    if predicate in _FAMILY:
        return "family"
    if predicate in _PEOPLE:
        return "people"
    return _KIND_OF.get(predicate, "others")


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity the turn names; `kind` as far as the pattern tells (person, place, …)."""

    name: str
    kind: str | None


@dataclass(frozen=True, slots=True)
class Fact:
    """`subject —predicate→ object`; `statement`, the sentence a profile fact says it in."""

    subject: str
    predicate: str
    object: str
    kind: str
    subject_type: str | None
    object_type: str | None
    statement: str

    @property
    def single(self) -> bool:
        return self.predicate in SINGLE_VALUED


@dataclass(frozen=True, slots=True)
class Extraction:
    mentions: tuple[Mention, ...]  # every entity named, relation ends included
    facts: tuple[Fact, ...]

    def only(self, kinds: Iterable[str]) -> Extraction:
        """What the kinds switched on keep: their facts, the entities those name, and the
        free mentions when "mentions" is on."""
        on = set(kinds)
        facts = tuple(f for f in self.facts if f.kind in on)
        named = {name_key(n) for f in facts for n in (f.subject, f.object)}
        mentions = tuple(m for m in self.mentions if name_key(m.name) in named or "mentions" in on)
        return Extraction(mentions, facts)


_CJK = re.compile(r"[\u4e00-\u9fff]")
_ENGLISH = re.compile(r"\b[A-Za-z]{2,}\s+[A-Za-z]{2,}\b")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+|(?<=[。！？；!?])")


def extract(text: str) -> Extraction:
    """What one user turn states (a pure function of the text)."""
    state = _Turn()
    for raw in _SENTENCE.split(_normalise(text)):
        sentence = raw.strip()
        if not sentence:
            continue
        if _CJK.search(sentence) and not _ENGLISH.search(sentence):
            _chinese(sentence, state)
        else:
            _english(sentence, state)
    return state.result()


def resolve(found: Extraction, known: Mapping[str, str]) -> Extraction:
    """Names as the user's graph already has them: `known` maps a name's key (an entity's
    own, or an alias's) to the entity's name. A single word that is the first or last word
    of exactly one known person's name is that person ("Rui" is "Su Rui")."""
    words: dict[str, set[str]] = {}
    for key, name in known.items():
        parts = key.split()
        if len(parts) > 1:
            for w in (parts[0], parts[-1]):
                words.setdefault(w, set()).add(name)

    def canonical(name: str) -> str:
        if name == USER:
            return name
        key = name_key(name)
        if key in known:
            return known[key]
        if " " not in key and len(words.get(key, ())) == 1:
            return next(iter(words[key]))
        return name

    facts = tuple(
        f
        if f.kind == "alias"
        else replace(f, subject=canonical(f.subject), object=canonical(f.object))
        for f in found.facts
    )
    mentions: dict[str, Mention] = {}
    for m in found.mentions:
        name = canonical(m.name)
        mentions.setdefault(name_key(name), Mention(name, m.kind))
    return Extraction(tuple(mentions.values()), facts)


# --- one turn's state -----------------------------------------------------------------


class _Turn:
    def __init__(self) -> None:
        self.mentions: dict[str, Mention] = {}
        self.facts: dict[tuple[str, str, str], Fact] = {}
        self.people: dict[str, str] = {}  # names the turn introduced -> their kind
        self.starts: set[str] = set()  # sentence-initial capitalised words, unconfirmed

    def mention(self, name: str, kind: str | None) -> None:
        key = name_key(name)
        if not key or name == USER:
            return
        seen = self.mentions.get(key)
        if seen is None or (seen.kind is None and kind):
            self.mentions[key] = Mention(seen.name if seen else name, kind)

    def fact(
        self,
        subject: str,
        predicate: str,
        obj: str,
        statement: str,
        *,
        subject_type: str | None = None,
        object_type: str | None = None,
    ) -> None:
        obj = obj.strip()
        if not obj or name_key(obj) == name_key(subject):
            return
        kind = kind_of(subject, predicate)
        if subject != USER:
            self.mention(subject, subject_type)
        if predicate != "also_known_as":  # a second name of an entity, no entity of its own
            self.mention(obj, object_type)
        self.facts.setdefault(
            (name_key(subject), predicate, name_key(obj)),
            Fact(subject, predicate, obj, kind, subject_type, object_type, statement),
        )

    def introduce(self, name: str, kind: str) -> None:
        self.people.setdefault(name, kind)
        self.mention(name, kind)

    def result(self) -> Extraction:
        return Extraction(tuple(self.mentions.values()), tuple(self.facts.values()))


@dataclass(frozen=True)
class _Subject:
    """Whom a clause's verbs speak of, and how its statements name them ("The user", "用户",
    or the person's name): one place that fills in the subject's half of every fact."""

    turn: _Turn
    name: str
    type: str | None
    said: str

    def fact(self, predicate: str, obj: str, statement: str, object_type: str) -> None:
        self.turn.fact(
            self.name, predicate, obj, statement, subject_type=self.type, object_type=object_type
        )


def _normalise(text: str) -> str:
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    # A title's dot is no sentence's end.
    return re.sub(r"\b(Dr|Mr|Mrs|Ms|Prof|St)\.\s", r"\1 ", text)


def _alternation(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# --- English --------------------------------------------------------------------------

_REL_EN = {**p.FAMILY_EN, **p.PEOPLE_EN}
_REL_ALT = _alternation(_REL_EN)
_PET_ALT = _alternation(p.PETS_EN)
_DIET_ALT = _alternation(p.DIETS_EN)
_N = p.NAME_ANY
_NAMED = (
    r"(?:\s*,\s*|\s+(?:is\s+)?(?:called|named)\s+|'s\s+name\s+is\s+|\s+whose\s+name\s+is\s+|\s+)"
)
_MY_REL = re.compile(rf"\b[Mm]y\s+(?P<rel>{_REL_ALT})(?![\w-]){_NAMED}(?P<name>{_N})")
_NAME_IS_MY = re.compile(
    rf"(?P<name>{_N})(?:\s*[(（]\s*{_N}\s*[)）])?(?:\s*,?\s+is\s+|\s*,\s*)my\s+(?P<rel>{_REL_ALT})(?![\w'-])",
    re.UNICODE,
)
_HAVE_REL = re.compile(
    rf"\bI\s+have\s+an?\s+(?:older\s+|younger\s+|little\s+|big\s+|twin\s+)?(?P<rel>{_REL_ALT})"
    rf"\s+(?:called|named)\s+(?P<name>{_N})"
)
_MY_PET = re.compile(
    rf"\b[Mm]y\s+(?:[a-z]+\s+)?(?P<pet>{_PET_ALT})(?![\w'-]){_NAMED}(?P<name>{_N})"
)
_HAVE_PET = re.compile(
    rf"\b(?:I|We|we)\s+(?:have|got|adopted|own|have\s+got|rescued)\s+an?\s+(?:[a-z]+\s+){{0,2}}?"
    rf"(?P<pet>{_PET_ALT})\s*,?\s+(?:called|named)\s+(?P<name>{_N})"
)
_AND_PET = re.compile(
    rf"\band\s+an?\s+(?:[a-z]+\s+){{0,2}}?(?P<pet>{_PET_ALT})\s*,?\s+(?:called|named)\s+(?P<name>{_N})"
)
_ALIAS = re.compile(
    rf"(?P<a>{_N})\s*[(（]\s*(?P<b>{_N})\s*[)）]"
    rf"|(?P<c>{_N}),?\s+(?P<say>aka|a\.k\.a\.|also known as|also called|who goes by|goes by)"
    rf"\s+(?P<d>{_N})"
)
_ADV = r"(?:(?:also|now|still|currently|just|recently|actually|finally|really|happily|already)\s+)*"
_ARTICLE_ROLE = (
    r"an?\s+(?P<role>(?:[a-z-]+\s+){0,2}?[a-z-]+)(?=\s+(?:at|for|in|while|since|because|and)\s|$)"
)
# (pattern, predicate, how the statement says it)
_VP_PLACE = [
    (
        re.compile(
            rf"{_ADV}(?:live|lives|living|am\s+living|is\s+living|reside|resides)\s+in\s+(?P<o>{_N})"
        ),
        "lives_in",
        "lives in",
    ),
    (
        re.compile(
            rf"{_ADV}(?:have\s+|has\s+)?{_ADV}(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<o>{_N})"
        ),
        "lives_in",
        "lives in",
    ),
    (re.compile(rf"{_ADV}(?:am|is)\s+{_ADV}based\s+in\s+(?P<o>{_N})"), "lives_in", "lives in"),
    (
        re.compile(rf"{_ADV}(?:am|is|come|comes)\s+(?:originally\s+)?from\s+(?P<o>{_N})"),
        "from",
        "is from",
    ),
    (
        re.compile(rf"{_ADV}(?:was|were)\s+born\s+(?:and\s+raised\s+)?in\s+(?P<o>{_N})"),
        "from",
        "is from",
    ),
    (re.compile(rf"{_ADV}grew\s+up\s+in\s+(?P<o>{_N})"), "from", "is from"),
]
_VP_WORK_AS = re.compile(
    rf"{_ADV}(?:work|works|am\s+working|is\s+working)\s+as\s+{_ARTICLE_ROLE}"
    rf"(?:\s+(?:at|for)\s+(?P<o>{_N}))?"
)
_VP_WORK_AT = re.compile(
    rf"{_ADV}(?:work|works|am\s+working|is\s+working)\s+(?:at|for)\s+(?:the\s+)?(?P<o>{_N})"
)
_VP_ROLE_AT = re.compile(
    rf"{_ADV}(?:am|is)\s+{_ADV}{_ARTICLE_ROLE}(?:\s+(?:at|for)\s+(?P<o>{_N}))?"
)
_VP_STUDY = re.compile(
    rf"{_ADV}(?:study|studies|am\s+studying|is\s+studying)\s+(?:[a-z]+\s+)?at\s+(?P<o>{_N})"
)
_VP_DIET = re.compile(
    rf"{_ADV}am\s+(?:an?\s+)?(?:strict\s+|lifelong\s+|full\s+|fully\s+)?(?P<d>{_DIET_ALT})\b"
)
_VP_ALLERGY = re.compile(
    rf"{_ADV}am\s+(?:very\s+|severely\s+|deathly\s+|highly\s+|mildly\s+)?allergic\s+to\s+(?P<o>[a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)"
    rf"|{_ADV}have\s+an?\s+(?:severe\s+|mild\s+)?(?P<o2>[a-z]+(?:\s+[a-z]+)?)\s+allergy"
)
_VP_AVOID = re.compile(rf"{_ADV}(?:don't|do\s+not|never)\s+eat\s+(?P<o>[a-z]+(?:\s+[a-z]+)?)")
_VP_SPEAK = re.compile(
    rf"{_ADV}(?:speak|am\s+fluent\s+in|am\s+a\s+native\s+(?=\w+\s+speaker))\s*(?P<o>[A-Z][a-z]+)"
)
_VP_LEARN = re.compile(rf"{_ADV}am\s+(?:currently\s+)?learning\s+(?P<o>[A-Z][a-z]+)")
_VP_PREFER = re.compile(
    rf"{_ADV}(?P<v>prefer|love|like|enjoy|adore|hate|dislike|detest|can't\s+stand|cannot\s+stand|"
    r"don't\s+like|do\s+not\s+like|really\s+like|really\s+love|really\s+hate)\s+(?P<o>.+)$"
)
_PREFER_VERB = {
    "prefer": "prefers",
    "love": "likes",
    "like": "likes",
    "enjoy": "likes",
    "adore": "likes",
    "hate": "dislikes",
    "dislike": "dislikes",
    "detest": "dislikes",
}
_PREFER_BAD_START = re.compile(
    r"^(?:it|that|this|these|those|you|him|her|them|me|us|my|our|your|his|their|when|how|"
    r"what|the\s+way|being|to\s+be|it's|a\s+lot|him|everything|nothing|something|anything|"
    r"going|having|the\s+idea|the\s+fact|to|if|who|which)\b",
    re.IGNORECASE,
)
_SEGMENT = re.compile(
    r"\s*(?:,\s*(?:and|but)\s+|\s+and\s+|\s+or\s+|\s+but\s+|\s+as\s+well\s+as\s+|,\s*|;\s*)"
)
_LIST_ITEM = re.compile(r"^(?:to\s+)?(?P<o>[a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)$")
_TRAILING = re.compile(
    r"\s+(?:too|as\s+well|a\s+lot|so\s+much|very\s+much|now|also|though|anyway|lately|"
    r"these\s+days|since\s+\w+|last\s+\w+|this\s+\w+|in\s+\d{4}|for\s+\w+\s+\w+)$"
)
_WORD_END = re.compile(r"(?:\s+(?:last|this|next|in|since|for|with|and|near|because)\b.*)$")


def _english(sentence: str, turn: _Turn) -> None:
    s = sentence.strip().strip('"').strip()
    if not s or s.endswith("?") or p.QUESTION_START_EN.match(s):
        return
    if p.HYPOTHETICAL_EN.search(s) or p.REPORTED_EN.search(s):
        return
    s = re.sub(r"\bI'm\b", "I am", s)
    s = re.sub(r"\bI've\b", "I have", s)
    s = re.sub(r"\b(\w+)'s\s+(?=(?:a|an|based|from|allergic|living|working)\b)", r"\1 is ", s)
    s = s.rstrip(".!; ")
    _people_en(s, turn)
    _aliases_en(s, turn)
    # Subjects: the user ("I …"), and each person the turn introduced.
    for m in re.finditer(r"\bI\s+", s):
        _verbs_en(s[m.end() :], USER, turn)
    for name, kind in list(turn.people.items()):
        if _CJK.search(name) or kind == "pet":
            continue
        appositive = r"(?:\s*,\s*my\s+[a-z-]+(?:\s+[a-z-]+)?\s*,)?"
        for m in re.finditer(rf"\b{re.escape(name)}{appositive}(?:\s*,\s*who|\s+who|\s*,)?\s+", s):
            _verbs_en(s[m.end() :], name, turn)
    intros = [n for n, k in turn.people.items() if k == "person"]
    if len(intros) == 1:
        for pronoun in re.finditer(r"(?:^|\band\s+)(?:She|He|she|he)\s+", s):
            _verbs_en(s[pronoun.end() :], intros[0], turn)
    if not _NEGATED_EN.search(s):
        _mentions_en(s, turn)


def _clean_name(raw: str) -> str | None:
    words = raw.split()
    while words and words[-1].lower().strip(".") in p.STOP_EN:
        words.pop()
    if not words:
        return None
    first = words[0].lower().strip(".")
    if first in p.STOP_EN and first not in ("dr", "mr", "mrs", "ms", "prof"):
        return None
    if first in ("dr", "mr", "mrs", "ms", "prof") and len(words) == 1:
        return None
    return " ".join(words)


def _people_en(s: str, turn: _Turn) -> None:
    for rx in (_MY_REL, _NAME_IS_MY, _HAVE_REL):
        for m in rx.finditer(s):
            name = _clean_name(m.group("name"))
            rel = m.group("rel").lower()
            if name is None:
                continue
            if rx is _NAME_IS_MY and m.start() > 0 and s[: m.start()].rstrip().endswith("'s"):
                continue
            predicate = _REL_EN[rel]
            turn.introduce(name, "person")
            turn.fact(
                USER,
                predicate,
                name,
                f"The user's {predicate.replace('_', ' ')} is {name}.",
                object_type="person",
            )
    pets = (_MY_PET, _HAVE_PET, _AND_PET) if _HAVE_PET.search(s) else (_MY_PET, _HAVE_PET)
    for rx in pets:
        for m in rx.finditer(s):
            name = _clean_name(m.group("name"))
            if name is None:
                continue
            word = m.group("pet").lower()
            animal = p.PETS_EN[word]
            turn.introduce(name, "pet")
            article = "an" if word[0] in "aeiou" else "a"
            turn.fact(
                USER,
                "owns",
                name,
                f"The user has {article} {word} named {name}.",
                object_type=animal,
            )


def _aliases_en(s: str, turn: _Turn) -> None:
    for m in _ALIAS.finditer(s):
        a = _clean_name(m.group("a") or m.group("c") or "")
        b = _clean_name(m.group("b") or m.group("d") or "")
        if a is None or b is None or name_key(a) == name_key(b):
            continue
        if not m.group("say") and a not in turn.people and b not in turn.people:
            continue  # a bracket after any capitalised word is no sure alias
        turn.fact(a, "also_known_as", b, f"{a} is also called {b}.")


def _verbs_en(rest: str, subject: str, turn: _Turn) -> None:
    """The verb phrases said of `subject`, one after another ("lives in Toronto and works at
    Shopify"); the first segment that is none ends it (the next may have another subject)."""
    segments = [x for x in _SEGMENT.split(rest) if x]
    user = subject == USER
    aux = ""  # "am vegetarian and allergic to peanuts": the second goes on with "am"
    i = 0
    while i < len(segments):
        seg = segments[i].strip()
        i += 1
        if p.NEGATION_EN.match(seg) and not (user and _list_verbs(seg, segments, i, _Turn())):
            continue
        for form in (seg, f"{aux} {seg}" if aux else None):
            if form is None:
                continue
            if user:
                listed = _list_verbs(form, segments, i, turn)
                if listed is not None:
                    i = listed
                    break
            if _one_verb(form, subject, turn):
                break
        else:
            return
        first = seg.split()[0].lower() if seg.split() else ""
        aux = first if first in ("am", "is") else aux


class _ListVerb(NamedTuple):
    """A first-person verb whose object may be a list ("allergic to peanuts and shellfish")."""

    rx: re.Pattern[str]
    predicate: str
    verb: str  # how the statement says it
    object_type: str
    known: Collection[str] | None  # the objects it takes; None: any
    capital: bool = False  # the items are capitalised words (languages)


_LIST_VERBS_EN = (
    _ListVerb(_VP_ALLERGY, "allergic_to", "is allergic to", "allergen", None),
    _ListVerb(_VP_AVOID, "avoids", "doesn't eat", "food", p.FOODS_EN),
)
_LANGUAGE_VERBS_EN = (
    _ListVerb(_VP_SPEAK, "speaks", "speaks", "language", p.LANGUAGES_EN, capital=True),
    _ListVerb(_VP_LEARN, "learning", "is learning", "language", p.LANGUAGES_EN, capital=True),
)


def _list_verbs(seg: str, segments: list[str], i: int, turn: _Turn) -> int | None:
    """Allergies, foods avoided, languages, diets, preferences: the first-person verbs whose
    object may be a list. The index after the items taken, or None when `seg` is none."""
    for verb in _LIST_VERBS_EN:
        m = verb.rx.match(seg)
        if m:
            return _list_items(verb, m, segments, i, turn)
    m = _VP_DIET.match(seg)
    if m:
        diet = p.DIETS_EN[m.group("d").lower()]
        turn.fact(USER, "diet", diet, f"The user is {diet}.", object_type="diet")
        return i
    for verb in _LANGUAGE_VERBS_EN:
        m = verb.rx.match(seg)
        if m:
            return _list_items(verb, m, segments, i, turn)
    m = _VP_PREFER.match(seg)
    if m:
        _preference_en(m, turn)
        return i
    return None


def _list_items(verb: _ListVerb, m: re.Match[str], segments: list[str], i: int, turn: _Turn) -> int:
    """The verb's object and the list items that follow it, one fact each."""
    items = [m.group("o") or m.groupdict().get("o2") or ""]
    i = _more_items(segments, i, items, capital=verb.capital)
    for item in items:
        item = _trim(item)
        if item and (verb.known is None or item in verb.known):
            statement = f"The user {verb.verb} {item}."
            turn.fact(USER, verb.predicate, item, statement, object_type=verb.object_type)
    return i


def _preference_en(m: re.Match[str], turn: _Turn) -> None:
    verb = " ".join(m.group("v").lower().replace("really ", "").split())
    predicate = _PREFER_VERB.get(verb, "dislikes")
    obj = _trim(re.split(r"\s+(?:over|rather\s+than|to|than|instead\s+of)\s+", m.group("o"))[0])
    if (
        obj
        and not _PREFER_BAD_START.match(obj)
        and len(obj.split()) <= 4
        and not re.search(r"[\d\"]", obj)
    ):
        turn.fact(USER, predicate, obj, f"The user {predicate} {obj}.", object_type="preference")


def _more_items(segments: list[str], i: int, items: list[str], *, capital: bool = False) -> int:
    while i < len(segments):
        seg = segments[i].strip()
        if capital:
            seg = re.sub(r"^(?:a\s+little|a\s+bit\s+of|some|basic|fluent|native)\s+", "", seg)
            if not re.fullmatch(r"[A-Z][a-z]+", seg):
                break
            items.append(seg)
        else:
            m = _LIST_ITEM.match(seg)
            if m is None:
                break
            items.append(m.group("o"))
        i += 1
    return i


def _trim(text: str) -> str:
    text = text.strip().rstrip(".!,;")
    for _ in range(3):
        text = _TRAILING.sub("", text)
    return text.strip()


_VP_ORG = ((_VP_WORK_AT, "works_at", "works at"), (_VP_STUDY, "studies_at", "studies at"))


def _one_verb(seg: str, subject: str, turn: _Turn) -> bool:
    user = subject == USER
    stype = None if user else turn.people.get(subject, "person")
    who = _Subject(turn, subject, stype, "The user" if user else subject)
    for rx, predicate, verb in _VP_PLACE:
        m = rx.match(seg)
        if m:
            place = _clean_name(m.group("o"))
            if place is not None:
                who.fact(predicate, place, f"{who.said} {verb} {place}.", "place")
            return place is not None
    m = _VP_WORK_AS.match(seg) or _VP_ROLE_AT.match(seg)
    if m:
        return _role_en(who, m)
    for rx, predicate, verb in _VP_ORG:
        m = rx.match(seg)
        if m:
            org = _clean_name(m.group("o"))
            if org is not None:
                who.fact(predicate, org, f"{who.said} {verb} {org}.", "organisation")
            return org is not None
    return False


def _role_en(who: _Subject, m: re.Match[str]) -> bool:
    """A role and where: "works as a nurse at St Mary's", "is a student at McGill"."""
    role = m.group("role").lower()
    org = _clean_name(m.group("o")) if m.group("o") else None
    head = role.split()[-1]
    if head not in p.ROLE_HEADS_EN or role.split()[0] in p.DIETS_EN:
        return False
    if head == "student" and org is not None:
        who.fact("studies_at", org, f"{who.said} studies at {org}.", "organisation")
        return True
    article = "an" if role[0] in "aeiou" else "a"
    who.fact("works_as", role, f"{who.said} works as {article} {role}.", "role")
    if org is not None:
        who.fact("works_at", org, f"{who.said} works at {org}.", "organisation")
    return True


_MENTION = re.compile(p.NAME_EN)
_NEGATED_EN = re.compile(r"\b(?:not|never|no\s+longer|no)\b|n't\b", re.IGNORECASE)


def _mentions_en(s: str, turn: _Turn) -> None:
    """Capitalised spans: a name unless it opens the sentence (where any word is capitalised)
    and the turn does not name it elsewhere."""
    opening = re.match(r"\W*", s)
    start = opening.end() if opening else 0
    for m in _MENTION.finditer(s):
        name = _clean_name(m.group(0))
        if name is None:
            # "My Sister Clara": drop the leading stop words and keep what is left.
            words = [w for w in m.group(0).split() if w.lower() not in p.STOP_EN]
            name = " ".join(words) if words and words == m.group(0).split()[-len(words) :] else None
            if name is None:
                continue
        if len(name) < 2 or name.isdigit():
            continue
        if m.start() == start and name_key(name) not in turn.mentions:
            turn.starts.add(name)
            continue
        turn.mention(name, None)


# --- Chinese --------------------------------------------------------------------------

_REL_ZH = {**p.FAMILY_ZH, **p.PEOPLE_ZH}
_REL_ZH_ALT = _alternation(_REL_ZH)
_PET_ZH_ALT = _alternation(p.PETS_ZH)
_ROLE_ZH_ALT = _alternation(p.ROLES_ZH)
_ADV_ZH = (
    r"(?:现在|目前|一直|还|已经|刚刚|刚|去年|今年|前年|上个月|上周|最近|也|都|从小|平时|本来|"
    r"早就|后来)*"
)
_ZH_NAMED = r"(?:叫做|名叫|叫|，|,)?"
_ZH_MY_REL = re.compile(rf"我(?!们)(?:的)?(?P<rel>{_REL_ZH_ALT}){_ZH_NAMED}")
_ZH_HAVE_REL = re.compile(
    rf"我(?!们)有(?:一个|一位|个|位)?(?:[\u4e00-\u9fff]{{0,2}}?)(?P<rel>{_REL_ZH_ALT})[，,]?(?:叫做|名叫|叫)"
)
_ZH_MY_PET = re.compile(rf"我(?!们)(?:的|家)?(?:的)?(?P<pet>{_PET_ZH_ALT})(?:叫做|名叫|叫)")
_ZH_HAVE_PET = re.compile(
    rf"我(?!们)(?:家)?(?:养了|养|有)(?:一只|一条|只|条|一个)?(?:[\u4e00-\u9fff]{{0,3}}?)"
    rf"(?P<pet>{_PET_ZH_ALT})[，,]?(?:叫做|名叫|叫)"
)
_ZH_ALIAS = re.compile(
    r"(?P<a>[\u4e00-\u9fff]{2,4}|[A-Z][a-z]+)(?:也叫|又叫|英文名叫|英文名是|的英文名是|小名叫|外号叫)"
    r"(?P<b>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?|[\u4e00-\u9fff]{2,4})"
    r"|(?P<c>[\u4e00-\u9fff]{2,4})\s*[（(]\s*(?P<d>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\s*[)）]"
)
# (pattern, predicate, what the statement says between the subject and the place)
_ZH_PLACE_VERBS = [
    (re.compile(rf"{_ADV_ZH}(?:住在|生活在|定居在|定居于|常住在?)"), "lives_in", "住在"),
    (re.compile(rf"{_ADV_ZH}(?:搬到|搬去|搬回|搬家到)了?"), "lives_in", "住在"),
    (re.compile(rf"{_ADV_ZH}(?:来自|出生在|出生于)"), "from", "来自"),
]
_ZH_AT = re.compile(
    rf"{_ADV_ZH}在(?P<o>[^，,。！？；\s]{{2,12}}?)(?P<v>工作|上班|读研|读博|读书|上学|读大学|念书|读本科|读高中|住|生活|做|当)"
)
_ZH_FROM = re.compile(
    rf"{_ADV_ZH}(?:在(?P<a>[\u4e00-\u9fff]{{2,4}}?)长大|是(?P<b>[\u4e00-\u9fff]{{2,4}}?)人(?=$|[，,。！；]))"
)
_ZH_ROLE = re.compile(
    rf"{_ADV_ZH}是(?:一名|一个|个|名|位|一位)?(?P<r>{_ROLE_ZH_ALT})(?=$|[，,。！；])"
)
_ZH_DIET = re.compile(
    rf"{_ADV_ZH}(?:吃素|是素食(?:主义)?者|吃全素|是纯素(?:食)?(?:主义)?者|吃纯素)"
)
_ZH_AVOID = re.compile(
    rf"{_ADV_ZH}(?:不吃|不能吃|从不吃|从来不吃)(?P<o>[\u4e00-\u9fff]{{1,4}})(?=$|[，,。！；和])"
)
_ZH_ALLERGY = re.compile(rf"{_ADV_ZH}(?:对)?(?P<o>[\u4e00-\u9fff、和]{{1,12}}?)过敏")
_ZH_SPEAK = re.compile(
    rf"{_ADV_ZH}(?:会说|会讲|能说|说|讲)(?:一口|一点点|一点|一些)?(?:流利的)?(?P<o>[\u4e00-\u9fff、和]{{2,12}})"
)
_ZH_NATIVE = re.compile(r"的母语是(?P<o>[\u4e00-\u9fff]{1,3}[语文话])")
_ZH_LEARN = re.compile(
    rf"{_ADV_ZH}(?:在学|正在学|在学习|正在学习)(?P<o>[\u4e00-\u9fff]{{1,3}}[语文])"
)
_ZH_PREFER = re.compile(
    rf"{_ADV_ZH}(?P<v>不喜欢|讨厌|受不了|更喜欢|比较喜欢|喜欢|爱吃|爱)(?P<o>[^，,。！？；\s]{{1,8}})"
)
_ZH_PREFER_VERB = {
    "不喜欢": "dislikes",
    "讨厌": "dislikes",
    "受不了": "dislikes",
    "更喜欢": "prefers",
    "比较喜欢": "prefers",
    "喜欢": "likes",
    "爱吃": "likes",
    "爱": "likes",
}
_NOT_NAMES_ZH = p.STOP_ZH | set(_REL_ZH) | set(p.PETS_ZH)  # jieba tags 哥哥 nr at times
_ZH_CLAUSE = re.compile(r"[，,、：:]")
_ZH_NAME_OK = re.compile(r"^(?:[\u4e00-\u9fff]{2,4}|[A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)?)$")
_ZH_STUDY = ("读研", "读博", "读书", "上学", "读大学", "念书", "读本科", "读高中")
_ZH_WORK = ("工作", "上班", "做", "当")
_ZH_PREFER_BAD = re.compile(r"^(?:你|他|她|它|这|那|我|的|了|上|一)")


def _chinese(sentence: str, turn: _Turn) -> None:
    s = sentence.strip().rstrip("。！!；;")
    if not s or s.endswith(("?", "？")) or p.QUESTION_ZH.search(s):
        return
    if p.HYPOTHETICAL_ZH.search(s) or p.REPORTED_ZH.search(s):
        return
    tokens = _tags(s)
    starts = {start: (word, flag) for word, flag, start in tokens}
    _people_zh(s, starts, turn)
    ends = {start + len(word): word for word, _, start in tokens}
    for m in _ZH_ALIAS.finditer(s):
        first = "a" if m.group("a") else "c"
        a, b = m.group(first), m.group("b") or m.group("d")
        if a and _CJK.match(a):
            # The regex cannot tell where a name begins ("妹妹晓棠也叫…"): the person the
            # turn introduced that ends there, else jieba's word that does.
            word = ends.get(m.end(first), a)
            a = next((n for n in turn.people if a.endswith(n)), word)
        if a and b and a not in p.STOP_ZH and _ZH_NAME_OK.match(a):
            turn.fact(a, "also_known_as", b, f"{a}也叫{b}。")
    # Clause by clause: a clause that opens on a verb goes on with the last subject.
    subject: str | None = None
    offset = 0
    for clause in _ZH_CLAUSE.split(s):
        here = offset
        offset += len(clause) + 1
        anchors = _anchors_zh(clause, here, starts, turn)
        if not anchors and subject is not None:
            anchors = [(0, subject)]
        for at, who in anchors:
            if _verbs_zh(clause[at:], who, turn, here + at, starts):
                subject = who
    for word, flag, _ in tokens:
        kind = {
            "nr": "person",
            "nrt": "person",
            "nrfg": "person",
            "ns": "place",
            "nt": "organisation",
        }.get(flag)
        if kind and word not in _NOT_NAMES_ZH and _ZH_NAME_OK.match(word) and len(word) >= 2:
            turn.mention(word, kind)


def _tags(text: str) -> list[tuple[str, str, int]]:
    """jieba's part-of-speech tags, each with where the word starts."""
    from app.core.rewrite import _pos_tagger  # the process's one tagger, loaded on first use

    out: list[tuple[str, str, int]] = []
    at = 0
    for pair in _pos_tagger().cut(text):
        word, flag = pair.word, pair.flag
        out.append((word, flag, at))
        at += len(word)
    return out


def _name_at(s: str, at: int, starts: Mapping[int, tuple[str, str]]) -> str | None:
    """The name that starts at `at`: jieba's word there, when it can be a name."""
    found = starts.get(at)
    if found is None:
        return None
    word, flag = found
    if word in p.STOP_ZH or flag in ("v", "p", "r", "d", "c", "u", "uj", "ul", "m", "x", "q", "f"):
        return None
    if flag == "eng":
        m = re.match(r"[A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)?", s[at:])
        return m.group(0) if m else None
    if not _ZH_NAME_OK.match(word) or p.NEGATION_ZH.search(word):
        return None
    return word


def _people_zh(s: str, starts: Mapping[int, tuple[str, str]], turn: _Turn) -> None:
    for rx in (_ZH_MY_REL, _ZH_HAVE_REL):
        for m in rx.finditer(s):
            if m.start() > 0 and s[m.start() - 1] in "的和跟与":
                continue
            name = _name_at(s, m.end(), starts)
            if name is None:
                continue
            word = m.group("rel")
            turn.introduce(name, "person")
            turn.fact(USER, _REL_ZH[word], name, f"用户的{word}是{name}。", object_type="person")
    for rx in (_ZH_MY_PET, _ZH_HAVE_PET):
        for m in rx.finditer(s):
            name = _name_at(s, m.end(), starts)
            if name is None:
                continue
            word = m.group("pet")
            turn.introduce(name, "pet")
            turn.fact(
                USER,
                "owns",
                name,
                f"用户有一只{word}叫{name}。",
                object_type=p.PETS_ZH[word],
            )


def _anchors_zh(
    clause: str, offset: int, starts: Mapping[int, tuple[str, str]], turn: _Turn
) -> list[tuple[int, str]]:
    """Where a subject's verbs may start in the clause: after "我" (not 我们, not "我的…"), and
    after each name the turn introduced."""
    out: list[tuple[int, str]] = []
    for m in re.finditer(r"我(?!们|的(?!母语))", clause):
        if m.start() > 0 and clause[m.start() - 1] in "和跟与对给让叫帮":
            continue
        rest = clause[m.end() :]
        if re.match(rf"(?:{_REL_ZH_ALT}|{_PET_ZH_ALT})", rest):
            continue  # "我妹妹…": the sentence is about her
        out.append((m.end(), USER))
    for name, kind in turn.people.items():
        if kind != "person":
            continue
        for m in re.finditer(re.escape(name), clause):
            out.append((m.end(), name))
    return sorted(out)


def _verbs_zh(
    rest: str, subject: str, turn: _Turn, at: int, starts: Mapping[int, tuple[str, str]]
) -> bool:
    user = subject == USER
    who = _Subject(turn, subject, None if user else "person", "用户" if user else subject)
    for rx, predicate, verb in _ZH_PLACE_VERBS:
        m = rx.match(rest)
        if m:
            place = _place_at(rest, m.end(), at, starts)
            if place is not None:
                who.fact(predicate, place, f"{who.said}{verb}{place}。", "place")
            return place is not None
    m = _ZH_AT.match(rest)
    if m:
        return _at_zh(who, m, rest, at, starts)
    m = _ZH_FROM.match(rest)
    if m:
        place = m.group("a") or m.group("b")
        if _is_place(place, at + m.start("a" if m.group("a") else "b"), starts):
            who.fact("from", place, f"{who.said}来自{place}。", "place")
            return True
    m = _ZH_ROLE.match(rest)
    if m:
        who.fact("works_as", m.group("r"), f"{who.said}是{m.group('r')}。", "role")
        return True
    return user and _user_verbs_zh(rest, turn)


def _at_zh(
    who: _Subject, m: re.Match[str], rest: str, at: int, starts: Mapping[int, tuple[str, str]]
) -> bool:
    """在…工作/读书/住: whether the span is a place or an organisation is jieba's call (its
    tags, or an organisation's suffix), and the verb says which relation it is."""
    where, verb = m.group("o"), m.group("v")
    place_like = _is_place(where, at + m.start("o"), starts)
    org_like = _is_org(where, at + m.start("o"), starts) or (
        verb in ("做", "当")
        and _span_tokens(where, at + m.start("o"), starts) is not None
        and not re.match(r"[一这那某家]", where)
    )
    if not (place_like or org_like):
        return False
    kind = "place" if place_like else "organisation"
    if verb in ("住", "生活"):
        if place_like:
            who.fact("lives_in", where, f"{who.said}住在{where}。", "place")
        return place_like
    if verb in _ZH_STUDY:
        predicate = "studies_in" if place_like and not org_like else "studies_at"
        who.fact(predicate, where, f"{who.said}在{where}{verb}。", kind)
        return True
    if verb not in _ZH_WORK:
        return False
    at_place = place_like and not org_like and verb not in ("做", "当")
    who.fact("works_in" if at_place else "works_at", where, f"{who.said}在{where}工作。", kind)
    if verb in ("做", "当"):
        role = re.match(rf"(?P<r>{_ROLE_ZH_ALT})", rest[m.end() :])
        if role:
            who.fact("works_as", role.group("r"), f"{who.said}是{role.group('r')}。", "role")
    return True


def _user_verbs_zh(rest: str, turn: _Turn) -> bool:
    """What only "我" is said to be here: diet, foods, allergies, languages, likes."""
    if re.match(rf"{_ADV_ZH}(?:有)?乳糖不耐受?", rest):
        turn.fact(USER, "diet", "lactose intolerant", "用户乳糖不耐受。", object_type="diet")
        return True
    if _ZH_DIET.match(rest):
        vegan = "纯素" in rest[:12] or "全素" in rest[:12]
        diet = "vegan" if vegan else "vegetarian"
        turn.fact(USER, "diet", diet, "用户吃纯素。" if vegan else "用户吃素。", object_type="diet")
        return True
    m = _ZH_AVOID.match(rest)
    if m:
        turn.fact(USER, "avoids", m.group("o"), f"用户不吃{m.group('o')}。", object_type="food")
        return True
    m = _ZH_ALLERGY.match(rest)
    if m and not p.NEGATION_ZH.search(m.group("o")):
        for item in re.split(r"[、和]", m.group("o")):
            if 1 <= len(item) <= 4:
                turn.fact(USER, "allergic_to", item, f"用户对{item}过敏。", object_type="allergen")
        return True
    return _languages_zh(rest, turn) or _preference_zh(rest, turn)


def _languages_zh(rest: str, turn: _Turn) -> bool:
    m = _ZH_LEARN.match(rest)
    if m:
        turn.fact(
            USER, "learning", m.group("o"), f"用户在学{m.group('o')}。", object_type="language"
        )
        return True
    m = _ZH_SPEAK.match(rest)
    if m:
        items = [x for x in re.split(r"[、和]", m.group("o")) if p.LANGUAGE_ZH.fullmatch(x)]
        for item in items:
            turn.fact(USER, "speaks", item, f"用户会说{item}。", object_type="language")
        return bool(items)
    m = _ZH_NATIVE.match(rest)
    if m:
        turn.fact(USER, "speaks", m.group("o"), f"用户会说{m.group('o')}。", object_type="language")
        return True
    return False


def _preference_zh(rest: str, turn: _Turn) -> bool:
    m = _ZH_PREFER.match(rest)
    if m is None:
        return False
    obj = m.group("o")
    if _ZH_PREFER_BAD.match(obj) or p.NEGATION_ZH.search(obj):
        return False
    predicate = _ZH_PREFER_VERB[m.group("v")]
    said = {"likes": "喜欢", "prefers": "更喜欢", "dislikes": "不喜欢"}[predicate]
    turn.fact(USER, predicate, obj, f"用户{said}{obj}。", object_type="preference")
    return True


def _place_at(rest: str, end: int, at: int, starts: Mapping[int, tuple[str, str]]) -> str | None:
    found = starts.get(at + end)
    if found is None:
        return None
    word, flag = found
    if flag.startswith("ns") or (flag == "eng" and word[:1].isupper()):
        return word
    return None


def _span_tokens(
    where: str, at: int, starts: Mapping[int, tuple[str, str]]
) -> list[tuple[str, str]] | None:
    out: list[tuple[str, str]] = []
    i = at
    end = at + len(where)
    while i < end:
        tok = starts.get(i)
        if tok is None:
            return None
        out.append(tok)
        i += len(tok[0])
    return out if i == end else None


def _is_place(where: str, at: int, starts: Mapping[int, tuple[str, str]]) -> bool:
    toks = _span_tokens(where, at, starts)
    return bool(toks) and all(f.startswith("ns") for _, f in toks or [])


def _is_org(where: str, at: int, starts: Mapping[int, tuple[str, str]]) -> bool:
    toks = _span_tokens(where, at, starts)
    if not toks:
        return False
    flags = [f for _, f in toks]
    if any(f in ("m", "q", "r", "v", "p", "d", "c", "u", "uj") for f in flags):
        return False
    named = any(f in ("nt", "nz", "nrt", "eng") for f in flags)
    suffix = re.search(r"(?:公司|大学|学院|银行|医院|集团|研究所|中学|小学|事务所)$", where)
    return named or bool(
        suffix and suffix.start() > 0 and not where.startswith(("一", "这", "那", "某", "家"))
    )


def to_payload(found: Extraction) -> dict[str, Any]:
    """The extraction as JSON (the bench's report, a job's result)."""
    return {
        "mentions": [{"name": m.name, "kind": m.kind} for m in found.mentions],
        "facts": [
            {"subject": f.subject, "predicate": f.predicate, "object": f.object, "kind": f.kind}
            for f in found.facts
        ],
    }


def keys_of(names: Sequence[str]) -> set[str]:
    return {name_key(n) for n in names}
