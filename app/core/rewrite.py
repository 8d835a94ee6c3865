"""Query rewriting without an LLM: a follow-up that leans on the conversation ("what about
her?", 「那摔伤算吗？」) becomes a standalone query from the session's last turns.

The heuristic, in three steps, Chinese and English alike:
1. Does the query depend on the conversation? It does when it holds a pronoun or a
   demonstrative (it/that/this/they/he/she/her/those/one; 它/他/她/这/那/这个/那个/这些/他们…)
   or opens or closes as an ellipsis ("what about …", "and …?", 「那…」, 「…呢？」).
   Anything else is self-contained and returned unchanged.
2. The entity a reference points at, from the entities the recent turns name
   (`app.core.entities`' mentions, a relative, what something is called): she/he/她/他 the
   newest person, there/那里 the newest place, it/它/这个 the newest other entity; a first
   name the turns give in full is written in full ("Lena" → "Lena Park", `full_names`).
3. The salient terms of the recent turns: names and nouns (jieba's part-of-speech tags for
   Chinese; capitalised words and content words for English), weighted by how recent the
   turn is and how often the term recurs (the topic the turns come back to, 意外险 in
   意外身故 and 意外医疗), user turns above assistant turns. A resolved query takes the top
   ones after the entity; an unresolved one is expanded with them, which is what recall
   needs (both the lexical and the dense ranking then see the subject the user left out).

Pure functions, no I/O: the rewrite service feeds them the turns it read.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from app.core.memo import text_memo
from app.core.terms import CHINESE_STOPWORDS, ENGLISH_STOPWORDS, segmenter, tokenize

# Personal pronouns a name can stand in for; the rest of the anaphora only expand.
_EN_PERSONAL = frozenset({"he", "him", "his", "she", "her", "hers", "they", "them", "their"})
_EN_ANAPHORA = _EN_PERSONAL | frozenset(
    {"it", "its", "that", "this", "these", "those", "one", "ones", "there", "same"}
)
_EN_ELLIPSIS = re.compile(
    r"^\s*(and|also|what about|how about|what if|same for|then|so)\b|\bagain\s*\??\s*$",
    re.IGNORECASE,
)
_ZH_PERSONAL = ("他们", "她们", "他", "她")
_ZH_ANAPHORA = re.compile(r"[它他她这那此]")
_ZH_ELLIPSIS = re.compile(r"(^\s*(那|那么|还有|另外)|呢\s*[？?]?\s*$)")
# A closing 来着 asks again about something said before ("几号交来着？", like a closing
# "again"), unless the question says what it asks about itself (`_laizhe_leans`).
_ZH_LAIZHE = re.compile(r"来着\s*[？?]?\s*$")
# Question words: no help in telling what a question is about.
_ZH_ASKING = frozenset(
    """
    几号 几点 几月 几月份 月份 几天 几年 几个 几次 几岁 多少 多少钱 多大 多远 多长 多久 什么
    什么时候 时候 哪里 哪儿 哪天 哪个 哪家 哪些 怎么 为什么 谁 啥 叫啥 啥时候
    """.split()  # noqa: SIM905
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
# Common English verbs, adjectives, adverbs and time words: never the subject a follow-up
# leaves out. (No English tagger ships offline; this list does the job of one, roughly.)
_EN_NOT_SUBJECT = frozenset(
    """
    about actually after amazing anything awesome everything exciting interesting left nothing
    prepare ready something again ago already also always another anyway around away back bad
    best better big broke brought buy bought call called came can't come coming could did
    does doing done don't down enjoy enjoyed even ever every feel feeling felt find fine
    found get gets getting give given glad go goes going gone good got great had happy has
    have having hear heard hello help hey hi hope how i'd i'll i'm i've just keep kind know
    last later let let's like liked little look looking lot lots love loved lovely made
    make making many maybe mean might more most much must need needed never new next nice
    now okay old one only other please pretty put quite really right said same saw say says
    see seem seems sent should since sorry sound sounds still stay staying sure take taking
    tell thank thanks that's there's thing things think thought today told tomorrow tonight
    took tried try trying two use used very visit visiting want wanted wants was way week
    weekend well went what's will wish without wonderful won't work would wow yeah year
    years yes yesterday yet you're
    """.split()  # noqa: SIM905 (a word list reads best as words)
)
# Capitalised mid-sentence, yet never the person or thing a pronoun stands for: "cook for
# her on Saturday" made "she" Saturday. ("May" is left out: it is also a name.)
_EN_CALENDAR = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday january february march april
    june july august september october november december
    """.split()  # noqa: SIM905
)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# jieba tags kept as salient: nouns, names, places, organisations, other proper nouns,
# verbal nouns, and Latin-script words inside Chinese text.
_ZH_NOUN_TAGS = ("n", "nr", "ns", "nt", "nz", "nw", "vn", "eng")

RECENT_TURNS = 6
MAX_TERMS = 3


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    query: str
    rewritten: str
    changed: bool
    method: Literal["llm", "heuristic", "none"]  # "llm" is the service's
    terms: tuple[str, ...] = ()
    usage: dict[str, int] | None = None  # the LLM's tokens, when one ran
    # The seqs of the session's turns it read, when the service read them itself (recall's
    # `session_id`): the caller holds those turns (`search.HeldTurnsLast`).
    read: frozenset[int] = frozenset()


@cache
def _pos_tagger() -> Any:
    """jieba's part-of-speech tagger, imported at its first use: the import reads ~45 MiB of
    tables (bench/HISTORY.md, "Memory at start"), ~3 MiB of which stay (below), and a service
    that never rewrites a Chinese follow-up need hold none. The first such request waits for
    the import once (a few hundred ms on a 2-core machine); the service runs it in a thread
    (`load_tagger`).

    The module's tagger is pointed at the process's segmenter (`terms.segmenter()`): left on
    jieba's default it would load jieba's full dictionary (~60 MiB) beside the compact one,
    for the same words. Its tag table, a dict of every word that the import has just read
    (~40 MiB), gives way to the segmenter's (a byte a word): the same tags, and the caller
    trims the heap it leaves (`services/rewrite.py`)."""
    import jieba.posseg

    tagger = jieba.posseg.dt
    tagger.tokenizer = segmenter()
    tagger.word_tag_tab = tagger.tokenizer.word_tags()
    return tagger


def tagger_missing_for(query: str, turns: Sequence[Turn]) -> bool:
    """True when this rewrite needs the tagger (Chinese in the query or the turns) and it is
    not loaded yet: a caller on the event loop then runs `load_tagger` in a thread, so the
    first import does not hold up every other request."""
    if _pos_tagger.cache_info().currsize:
        return False
    return bool(_CJK.search(query)) or any(_CJK.search(t.content) for t in turns)


def load_tagger() -> None:
    _pos_tagger()


@text_memo(4 << 20, value_bytes=lambda pairs: 150 * len(pairs))
def _pos_cut(text: str) -> tuple[tuple[str, str], ...]:
    """(word, part-of-speech tag) of a Chinese text, once per text: a rewrite asks it of the
    same recent turns for every term it weighs, and context asks again at the next turn."""
    return tuple((pair.word, pair.flag) for pair in _pos_tagger().cut(text))


def _english_words(text: str) -> list[str]:
    """The words of `text`, lower-cased, less acronyms ("his IT job" has no "it")."""
    return [w.lower() for w in _WORD.findall(text) if not (w.isupper() and len(w) > 1)]


# English words that only look like references (`_not_referring`): "it" as a dummy
# subject ("how long did it take", "is it likely that …"), "there" of "is there", "that"
# opening a relative clause after a noun ("the shoes that Melanie got"), "one of", "this"
# of "this week". On LoCoMo's questions, which name whom they ask about, 179 of 1,982 were
# rewritten, nearly all wrongly ("… that brings her a lot of joy" → "… brings Yea …").
_EN_DUMMY_IT_NEXT = frozenset(
    {"take", "takes", "took", "taking", "seem", "seems", "seemed", "been"}
)
_EN_DUMMY_IT_STATE = frozenset({"likely", "possible", "true", "unlikely"})
_EN_THERE_BE = frozenset({"is", "are", "was", "were", "'s"})
_EN_THIS_TIME = frozenset(
    """
    week weekend month year morning afternoon evening summer winter spring autumn fall time
    semester season
    """.split()  # noqa: SIM905
)


def _not_referring(query: str) -> list[tuple[int, int]]:
    """The spans of the query's English reference words that refer to nothing before it;
    without a tagger, by their neighbours. Whatever the question: a "that" opening a clause
    ("the shoes that Melanie got"), "one of", "number one", "this week". Only when the
    question names someone itself (`_names_someone`), since a follow-up says the same
    without its subject ("How long did it take?", "Is there a dress code?"): a dummy "it"
    ("how long did it take for Jon to …"), "is there", "the same team", an it/they after a
    thing the question names ("Nate made ice cream and shared it")."""
    words = [(m.group(0).lower(), m.start(), m.end()) for m in _WORD.finditer(query)]
    named = _names_someone(query)
    out: list[tuple[int, int]] = []
    for i, (word, start, end) in enumerate(words):
        before = words[i - 1][0] if i > 0 else ""
        after = words[i + 1][0] if i + 1 < len(words) else ""
        after2 = words[i + 2][0] if i + 2 < len(words) else ""
        anywhere = (
            (word == "that" and _relative_that(before, after, query[end:]))
            or (word == "it" and after == "time")  # "is it time for his shots?"
            or (word == "one" and (after == "of" or before == "number"))
            or (word == "this" and after in _EN_THIS_TIME)
        )
        in_named = (
            named
            and (
                (word == "it" and after in _EN_DUMMY_IT_NEXT)
                or (word == "it" and before in ("is", "was") and after in _EN_DUMMY_IT_STATE)
                or (word == "it" and after in ("is", "was") and after2 in _EN_DUMMY_IT_STATE)
                or (word == "it" and before in ("is", "was") and after == "like")  # what is it like
                or (word == "it" and after in ("is", "was") and after2 == "like")  # say it was like
                or (word == "there" and (before in _EN_THERE_BE or after in _EN_THERE_BE))
                or (word == "there" and after == "be")  # will there be
                or (word == "same" and _content_words([after]) == 1)  # the same team as …
                or (word in _EN_THING_WORDS and _content_words(w for w, _, _ in words[:i]) >= 2)
            )
        )
        if anywhere or in_named:
            out.append((start, end))
    return out


def _names_someone(query: str) -> bool:
    """Whether the question names a person or a thing itself: a capitalised word after
    its first (not "I", a weekday or a month)."""
    for n, m in enumerate(_WORD.finditer(query)):
        word = m.group(0)
        bare = word.lower().split("'")[0]
        if n == 0 or not word[:1].isupper() or bare in ("i", "") or bare in _EN_CALENDAR:
            continue
        if bare not in ENGLISH_STOPWORDS:
            return True
    return False


_EN_THING_WORDS = frozenset({"it", "its", "they", "them", "their"})


def _content_words(words: Iterable[str]) -> int:
    return sum(
        1
        for w in words
        if w not in ENGLISH_STOPWORDS and w not in _EN_NOT_SUBJECT and w not in _EN_ANAPHORA
    )


# Words that open a clause: a "that" or "one" before them is named by that clause.
_EN_CLAUSE_OPENERS = frozenset({"i", "he", "she", "we", "they", "you", "who", "which", "that"})
# Before a relative "that" though not nouns: "something that …", "yesterday that …".
_EN_BEFORE_RELATIVE = _EN_THIS_TIME | frozenset(
    """
    something anything everything nothing someone anyone everyone somewhere one ones all
    yesterday today tonight tomorrow recently ago
    """.split()  # noqa: SIM905
)


def _relative_that(before: str, after: str, rest: str) -> bool:
    """A "that" that opens a clause ("the shoes that Melanie got", "something that …",
    "mention that she …"), not a demonstrative ("about that", "cancel that order"): not
    first or last, and before a pronoun or a name, or after an indefinite or a time."""
    if not (before and after):
        return False
    if after in _EN_CLAUSE_OPENERS or before in _EN_BEFORE_RELATIVE:
        return True
    # A name opens the clause: "a book that Tim …" ("Can I cancel that order?" is no clause).
    return re.match(r"\s+[A-Z][a-z]", rest) is not None


def _blank(query: str, spans: Sequence[tuple[int, int]]) -> str:
    """The query with these spans blanked out, at the same length."""
    for start, end in spans:
        query = query[:start] + " " * (end - start) + query[end:]
    return query


def needs_context(query: str) -> bool:
    """True when the query leans on the conversation (a pronoun, a demonstrative, an
    ellipsis); a self-contained query is left alone. Cheap, without the tagger: the
    heuristic rewrite also leaves a he/she that refers to a person the query names itself
    (`bound_pronouns`), and words that refer to nothing ("how long did it take")."""
    ellipsis = _EN_ELLIPSIS.search(query)
    # "how many nights again?" leans on the turns; "Why did John run for office again?"
    # and "where do I live again?" do not: a closing "again" counts unless the question
    # names someone or asks about the user in the first person (its "again" is "remind me").
    if ellipsis and (ellipsis.group(1) or not (_names_someone(query) or _in_first_person(query))):
        return True
    if _ZH_ELLIPSIS.search(query) or _laizhe_leans(query):
        return True
    referring = _blank(query, _not_referring(query))
    if any(w in _EN_ANAPHORA for w in _english_words(referring)):
        return True
    return bool(_ZH_ANAPHORA.search(query))


_EN_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "we", "us", "our", "ours"})


def _in_first_person(query: str) -> bool:
    """Whether an English question speaks of the user ("i", "my", "we"; "I'm" is "i")."""
    return any(w.split("'")[0] in _EN_FIRST_PERSON for w in _english_words(query))


def _laizhe_leans(query: str) -> bool:
    """A closing 来着 leans on the turns when the question names fewer than two things of its
    own ("几号交来着？", "我们约的几点来着"), not when it says what it asks about
    ("我妈妈生日是几号来着？": 妈妈, 生日)."""
    found = _ZH_LAIZHE.search(query)
    if found is None:
        return False
    words = {w for w in tokenize(query[: found.start()]) if len(w) >= 2 and w not in _ZH_ASKING}
    # A word inside a longer one is the same thing (电话, 号码 in 电话号码).
    return sum(1 for w in words if not any(w != o and w in o for o in words)) < 2


def bound_pronouns(query: str) -> str:
    """The query with each he/she/his/her/they/their/他/她 that follows a person the query names
    itself blanked out, at the same length: in "When did Calvin record a podcast with his
    friends?" or "小王说他什么时候到？" it is that person, not someone of the recent turns.
    A person: an English name (`_terms_of`' capitalised words), a Chinese one (jieba's
    `nr`), or a relative the query names ("my sister", 我妈妈). An English object (him,
    them, an object her) stays: it is someone else ("Should I ask Tom to pick her up?").
    English words that refer to nothing (`_not_referring`) are blanked too. Gender and
    number are not checked."""
    if _CJK.search(query):
        found = [m.start() for m in _ZH_RELATIVE.finditer(query)]
        at = 0
        for word, tag in _pos_cut(query):
            if tag == "nr" and not _ZH_PERSON.fullmatch(word):
                found.append(at)
            at += len(word)
        pattern = _ZH_PERSON
    else:
        names = [t for t, weight in _terms_of(query) if weight > 1]
        found = [m.start() for n in names for m in re.finditer(rf"\b{re.escape(n)}\b", query)]
        found += [m.start() for m in _EN_RELATIVE.finditer(query)]
        pattern = _EN_BINDABLE
        query = _blank(query, _not_referring(query))
    if not found:
        return query
    first = min(found)

    def bound(m: re.Match[str]) -> str:
        word = m.group(0).lower()
        if word == "her" and _object(m):
            return m.group(0)  # an object is someone else: "Did Tom tell her?"
        if m.start() < first and word not in _EN_POSSESSIVE:
            # A subject before the name is someone else ("Did she tell Tom?"); a
            # possessive is the person named ("Considering his talks, what would Jon do?").
            return m.group(0)
        return " " * len(word)

    return pattern.sub(bound, query)


def _object(match: re.Match[str]) -> bool:
    """An English "her" used as an object ("tell her about", "give her?"), not a possessive
    ("her job"): no word follows it, or a function word does."""
    after = _WORD.search(match.string, match.end())
    gap = match.string[match.end() : after.start()] if after else ""
    following = after.group(0).lower() if after else ""
    if following == "own":  # "her own store"
        return False
    return after is None or bool(gap.strip()) or following in ENGLISH_STOPWORDS


def _terms_of(text: str) -> list[tuple[str, float]]:
    """(term, weight) of one turn: names count double."""
    out: list[tuple[str, float]] = []
    if _CJK.search(text):
        for word, tag in _pos_cut(text):
            word = word.strip()
            if not word or word in CHINESE_STOPWORDS or not tag.startswith(_ZH_NOUN_TAGS):
                continue
            if tag == "eng" and (word.lower() in ENGLISH_STOPWORDS or len(word) < 2):
                continue
            out.append((word, 2.0 if tag in ("nr", "ns", "nt", "nz", "eng") else 1.0))
        return out
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        alone = len(_WORD.findall(sentence)) == 1  # "Fun!", "Exciting!": no name
        for i, match in enumerate(_WORD.finditer(sentence)):
            # A possessive names its owner: "Jake's class" is about Jake, whom a later "he"
            # stands for (as "he" became "Jake's" before).
            word = re.sub(r"'s$", "", match.group(0)).strip("'-")
            lower = word.lower()
            if lower in ENGLISH_STOPWORDS or lower in _EN_ANAPHORA or len(word) < 3:
                continue
            if lower in _EN_NOT_SUBJECT or lower in _EN_CALENDAR or lower.endswith("n't"):
                continue
            if "'" in lower and lower.split("'")[0] in ENGLISH_STOPWORDS | _EN_ANAPHORA:
                continue  # "It's", "They're": a pronoun and a verb, never a name
            if lower.endswith("ly") and len(lower) > 4:
                continue
            # A capital inside a sentence marks a name. At its start it marks a name only
            # when the word does not look like an ordinary one ("Maria lands tomorrow", not
            # "Exciting!" or "Noted."): common words were filtered above, and inflected
            # forms are taken for ordinary words.
            ordinary = lower.endswith(("ing", "ed", "es"))
            name = word[0].isupper() and (i > 0 or not (ordinary or alone))
            out.append((word if name else lower, 2.0 if name else 1.0))
    return out


def salient_terms(turns: Sequence[Turn], *, exclude: str = "", k: int = MAX_TERMS) -> list[str]:
    """The top `k` terms of the last turns (newest last), most salient first."""
    recent = [t for t in turns if t.role in ("user", "assistant")][-RECENT_TURNS:]
    scores: dict[str, float] = defaultdict(float)
    first_seen: dict[str, int] = {}
    excluded = exclude.lower()
    for distance, turn in enumerate(reversed(recent)):
        # The user states what they care about; the assistant's replies mostly echo it,
        # except the newest turn, whoever spoke it: that is what a follow-up answers
        # ("Your accident plan might help." / "那摔伤算吗？").
        recency = 0.75**distance
        speaker = 1.0 if turn.role == "user" or distance == 0 else 0.5
        for term, weight in _terms_of(turn.content):
            if term.lower() in excluded or term.lower() in _EN_OPENERS:
                continue  # the query says it already, or "Talk to you soon!"
            scores[term] += weight * recency * speaker
            first_seen.setdefault(term, len(first_seen))
    # The topic recurs: a term the other turns come back to (意外险 in 意外身故 and 意外医疗,
    # by its first two characters) outweighs the details the newest turn lists.
    texts = [t.content for t in recent]
    for term in scores:
        stem = term[:2] if _CJK.search(term) and len(term) >= 3 else term
        scores[term] += 0.5 * max(0, sum(stem in text for text in texts) - 1)
    ranked = sorted(scores, key=lambda t: (-scores[t], first_seen[t]))
    if not ranked:
        return []
    top = scores[ranked[0]]
    return [t for t in ranked[:k] if scores[t] >= 0.5 * top]


def _resolve_person(query: str, name: str) -> str | None:
    """The query with its first personal pronoun that does not refer to a person the query
    names itself (`bound_pronouns`) replaced by `name`, if it has one."""
    unbound = bound_pronouns(query)  # same length: its matches' positions are the query's
    for pronoun in _ZH_PERSONAL:
        if (at := unbound.find(pronoun)) >= 0:
            return query[:at] + name + query[at + len(pronoun) :]
    match = re.search(
        r"\b(" + "|".join(sorted(_EN_PERSONAL, key=len, reverse=True)) + r")\b",
        unbound,
        re.IGNORECASE,
    )
    if match is None:
        return None
    pronoun = match.group(1).lower()
    possessive = pronoun in ("his", "their", "hers") or (pronoun == "her" and not _object(match))
    replacement = f"{name}'s" if possessive else name
    return query[: match.start()] + replacement + query[match.end() :]


def unknown_entities(text: str, known: str) -> list[str]:
    """The names in `text` (capitalised English words, Chinese person, place and
    organisation names) that `known` never mentions: what an LLM's rewrite may not invent."""
    lowered = known.lower()
    names: list[str] = []
    chinese = bool(_CJK.search(text))
    if chinese:
        names += [w for w, tag in _pos_cut(text) if tag in ("nr", "ns", "nt", "nz")]
    for sentence in re.split(r"(?<=[.!?。？！])\s*", text):
        for i, match in enumerate(_WORD.finditer(sentence)):
            word = match.group(0).strip("'-")
            # A capital opens every English sentence; inside Chinese text it marks a name.
            first = i == 0 and not chinese
            if not first and word[:1].isupper() and word.lower() not in ENGLISH_STOPWORDS:
                names.append(word)
    return [n for n in dict.fromkeys(names) if n.lower() not in lowered]


def _is_name(term: str) -> bool:
    return term[:1].isupper() or (bool(_CJK.search(term)) and len(term) <= 4)


def heuristic_rewrite(query: str, turns: Sequence[Turn]) -> Rewrite:
    """The standalone form of `query` given the session's turns (newest last): a first name
    the turns give in full is written in full ("Lena" → "Lena Park"); a pronoun is replaced
    by the entity it refers to (`resolve_reference`); otherwise a query that leans on the
    turns takes their salient terms."""
    asked = query
    query, full = full_names(query, turns)
    if not needs_context(bound_pronouns(query)):
        if full:
            return Rewrite(asked, query, True, "heuristic", tuple(full))
        return Rewrite(asked, query, False, "none")
    terms = salient_terms(turns, exclude=query)
    reference = resolve_reference(query, turns)
    if reference is not None:
        # The pronoun named, the question stands alone: the turns' other words would only
        # pull the search towards those turns, which the caller has ("what is my sister
        # studying again? home christmas" found "my sister is coming home for christmas").
        text, name = reference
        names = _other_names(terms, text)
        return Rewrite(
            asked, f"{text} {' '.join(names)}".strip(), True, "heuristic", (name, *names)
        )
    if not terms:
        if full:
            return Rewrite(asked, query, True, "heuristic", tuple(full))
        return Rewrite(asked, query, False, "none")
    names = [t for t in terms if _is_name(t) and _person_like(t, turns)]
    if names:
        resolved = _resolve_person(query, names[0])
        if resolved is not None:
            more = _other_names(terms, resolved)
            rewritten = f"{resolved} {' '.join(more)}".strip()
            return Rewrite(asked, rewritten, True, "heuristic", (names[0], *more))
    rewritten = f"{query.rstrip()} {' '.join(terms)}"
    return Rewrite(asked, rewritten, True, "heuristic", tuple(terms))


def _other_names(terms: Sequence[str], text: str) -> list[str]:
    """The turns' capitalised terms the resolved question lacks, at most two: the rest of a
    name ("Trader" resolved, "Joe" kept). The turns' other words only pulled the search
    towards the turns the question was asked after ("… my sister studying again? home
    christmas" found "my sister is coming home for christmas")."""
    lowered = text.lower()
    return [
        t
        for t in terms
        if t[:1].isupper() and t.lower() not in lowered and t.lower() not in _EN_OPENERS
    ][:2]


# The commonest Chinese surnames: a two-character word jieba's dictionary tags as a name
# is one only when it opens with one (王芳, 小李); its dictionary also tags 别太 ("don't
# be too …") and 加薪 ("a raise") as names, which a "他们" must not become.
_ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝"
    "龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞"
    "左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕"
    "屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧"
    "闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)


def _zh_name_shaped(word: str) -> bool:
    """Two characters, a surname and a given name (王芳) or 小/老/阿 and a surname (老王),
    or three or more (a full name, a foreign one: 玛丽亚)."""
    if len(word) >= 3:
        return True
    if len(word) < 2:  # a surname alone: jieba cuts 小李 into 小 and 李
        return False
    return word[:1] in _ZH_SURNAMES or (word[:1] in "小老阿" and word[1:2] in _ZH_SURNAMES)


# Words that open a turn as an imperative or an interjection ("Talk to you soon!",
# "Take care", "Cheers"): capitalised there, and never a name.
_EN_OPENERS = frozenset(
    """
    talk see take let have keep stay hope catch good great thanks thank bye enjoy congrats
    congratulations wow yes yeah yea sure anytime together cheers sounds glad sorry love
    tell totally poor ouch oops nope btw omg lol haha aw aww ugh yikes
    """.split()  # noqa: SIM905
)


def _person_like(term: str, turns: Sequence[Turn]) -> bool:
    """A term is taken for a person when jieba tags it a person's name and it has a
    name's shape (`_zh_name_shaped`), or when it is an English word capitalised inside a
    sentence of the turns (a weak but cheap sign)."""
    if _CJK.search(term):
        return _zh_name_shaped(term) and any(
            word == term and tag == "nr"
            for t in turns[-RECENT_TURNS:]
            for word, tag in _pos_cut(t.content)
        )
    # A place is no one a "him" stands for: known as one, or named after in/at/near.
    if any(n.name == term and n.kind in ("place", "organisation") for n in recent_entities(turns)):
        return False
    place = re.compile(rf"\b(?:in|at|near)\s+{re.escape(term)}\b")
    if any(place.search(t.content) for t in turns[-RECENT_TURNS:]):
        return False
    # Capitalised inside a sentence somewhere, or opening one as its subject ("Maria lands
    # tomorrow"): a sentence's first word is capitalised whatever it is, and an
    # interjection or adverb there ("Bye, talk soon.", "Yea!", "Together we …") is no name.
    name = re.escape(term)
    inside = re.compile(rf"(?<![.!?]\s)(?<=\s){name}\b")
    subject = re.compile(
        rf"(?:^|[.!?]\s+){name}(?:'s)?\s+(?!(?:I|we|you|they|he|she|it)\b)[A-Za-z]"
    )
    if term.lower() in _EN_OPENERS:
        return False
    return term[:1].isupper() and any(
        inside.search(t.content) or subject.search(t.content) for t in turns[-RECENT_TURNS:]
    )


# What a pronoun stands for, by the kind of entity (`entities.Mention.kind`): a person for
# she/he/她/他, a place for there/那里, anything but a person for it/它/这个.
_EN_PERSON = re.compile(r"\b(she|he|her|him|his|hers)\b", re.IGNORECASE)
_EN_PLACE = re.compile(r"\bthere\b", re.IGNORECASE)
_EN_THING = re.compile(r"\b([Ii]ts?)\b")  # not "IT", the acronym
# What a name the query gives binds (`bound_pronouns`); not him or them, objects that are
# someone else.
_EN_BINDABLE = re.compile(r"\b(she|he|her|his|hers|they|their|theirs)\b", re.IGNORECASE)
_EN_POSSESSIVE = frozenset({"his", "her", "their"})
_ZH_PERSON = re.compile(r"[她他](?![们])")
_ZH_PLACE = re.compile(r"那里|那儿|那边|这里|这儿|这边")
_ZH_THING = re.compile(r"它(?![们])|这个|那个")
# A pet or a thing the user names: "叫旺财", "a beagle named Biscuit".
_ZH_CALLED = re.compile(r"(?:名叫|叫做|叫|名字是)([\u4e00-\u9fff]{2,4}?)(?=[，。！？,.!?\s]|$)")
_EN_CALLED = re.compile(r"\b(?:named|called)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)")
# A relative the user names by the relation alone: "my sister", 我妈妈.
# "my sister's dog Max" names Max, whom a "he" may stand for, not the relative; "my mom's
# birthday" and "my sister's husband lost his job" are still about the relative.
_EN_RELATIVE = re.compile(
    r"\bmy\s+(?:mom|mum|mother|dad|father|sister|brother|wife|husband|son|daughter|"
    r"grandma|grandmother|grandpa|grandfather|aunt|uncle|boss|girlfriend|boyfriend)\b"
    r"(?!['’]s\s+(?:\w+\s+)?(?:dog|cat|puppy|kitten|pet|bird|hamster|rabbit|horse|son|"
    r"daughter|kid|baby|boyfriend|girlfriend|husband|wife|friend|partner)\s+(?-i:[A-Z]))",
    re.IGNORECASE,
)
_ZH_RELATIVE = re.compile(
    r"(?:我|我的)(妈妈|妈|爸爸|爸|姐姐|妹妹|哥哥|弟弟|老婆|老公|女儿|儿子|奶奶|爷爷|外婆|外公|"
    r"老板|女朋友|男朋友)"
)
_ZH_TIME_WORD = re.compile(r"^[上下这今明昨本每][周月年天星]|[周月年天号]$")


@dataclass(frozen=True, slots=True)
class _Named:
    name: str
    kind: str | None  # person, place, organisation, pet, … (None: not known)


def recent_entities(turns: Sequence[Turn]) -> list[_Named]:
    """The entities the recent turns name, newest first (`app.core.entities`' mentions,
    the relatives a turn names, and what a turn says something is called)."""
    out: dict[str, _Named] = {}
    recent = [t for t in turns if t.role in ("user", "assistant")][-RECENT_TURNS:]
    for turn in reversed(recent):
        for named in _named_in(turn.content):
            out.setdefault(named.name.lower(), named)
    return list(out.values())


@text_memo(1 << 20, value_bytes=lambda found: 100 * len(found))
def _named_in(text: str) -> tuple[_Named, ...]:
    """The entities one turn names, once per text (context rewrites again at the next turn)."""
    from app.core import entities  # its patterns load with it; a rewrite needs them rarely

    found = [
        _Named(m.name, m.kind)
        for m in entities.extract(text).mentions
        if not _ZH_TIME_WORD.search(m.name) and m.name.lower() not in _EN_CALENDAR
    ]
    found += [_Named(m.group(1), "pet") for m in _ZH_CALLED.finditer(text)]
    found += [_Named(m.group(1), "person") for m in _ZH_RELATIVE.finditer(text)]
    found += [_Named(m.group(0).lower(), "person") for m in _EN_RELATIVE.finditer(text)]
    found += [_Named(m.group(1), "pet") for m in _EN_CALLED.finditer(text)]
    return tuple(found)


def resolve_reference(query: str, turns: Sequence[Turn]) -> tuple[str, str] | None:
    """(the query with its pronoun replaced by the entity it refers to, that entity), or
    None: she/he/她/他 the newest person the turns name, there/那里 the newest place, it/它/
    这个 the newest entity that is neither (a pet, a hotel, a company)."""
    # A word that opens a turn ("Congratulations!") is nobody a pronoun stands for.
    named = [n for n in recent_entities(turns) if n.name.lower() not in _EN_OPENERS]
    if not named:
        return None
    # An entity named in the query's own script first: an English question refers back to
    # "Lisbon" rather than to 海鲜 (which jieba tags a place), and the other way round.
    chinese = bool(_CJK.search(query))
    named.sort(key=lambda n: bool(_CJK.search(n.name)) != chinese)
    rules: tuple[tuple[re.Pattern[str], Callable[[_Named], bool], bool], ...] = (
        (_ZH_PERSON, lambda n: n.kind == "person", False),
        (_ZH_PLACE, lambda n: n.kind == "place", False),
        (_ZH_THING, lambda n: n.kind not in ("person", "place"), False),
        (_EN_PERSON, lambda n: n.kind == "person" or (n.kind is None and " " in n.name), True),
        (
            _EN_PLACE,
            lambda n: (
                n.kind in ("place", "organisation") or (n.kind is None and n.name[:1].isupper())
            ),
            True,
        ),
        (_EN_THING, lambda n: n.kind not in ("person", "place"), True),
    )
    unbound = bound_pronouns(query)  # same length: its matches' positions are the query's
    for pattern, fits, english in rules:
        match = pattern.search(unbound)
        if match is None:
            continue
        target = next((n for n in named if fits(n)), None)
        if target is None:
            continue
        word = match.group(0).lower()
        name = target.name
        if english and word == "there" and _existential(unbound, match):
            continue  # "Is there parking?": no place to put a name in; the terms follow
        if english and (word in ("his", "hers", "its") or (word == "her" and not _object(match))):
            replacement = f"{name}'s"  # "her flight" is Maria's flight
        elif english and word == "there":
            replacement = (
                f"in {name}" if not re.search(r"\b(?:in|at|to)\s+there\b", query) else name
            )
        else:
            replacement = name
        return query[: match.start()] + replacement + query[match.end() :], name
    return None


def _existential(query: str, match: re.Match[str]) -> bool:
    """Whether a matched "there" is the existential one ("Is there …", "there are …")."""
    before = re.search(r"(\S+)\s+$", query[: match.start()])
    after = re.match(r"\s+(\S+)", query[match.end() :])
    return (before is not None and before.group(1).lower() in _EN_THERE_BE) or (
        after is not None and after.group(1).lower() in _EN_THERE_BE
    )


def full_names(query: str, turns: Sequence[Turn]) -> tuple[str, list[str]]:
    """The query with each first name that the turns give in full written in full ("Lena" →
    "Lena Park", one full name only), and the full names it used."""
    named = [n.name for n in recent_entities(turns) if " " in n.name]
    used: list[str] = []

    def full(match: re.Match[str]) -> str:
        word = match.group(0)
        if (
            query[match.end() :]
            .lstrip()
            .startswith(tuple(n.split()[1] for n in named if n.split()[0] == word))
        ):
            return word  # already in full
        options = {n for n in named if n.split()[0] == word}
        if len(options) != 1:
            return word
        name = options.pop()
        used.append(name)
        return name

    out = re.sub(r"\b[A-Z][a-z]+\b", full, query) if named else query
    return out, used
