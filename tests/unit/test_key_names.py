"""Every key built from identifiers is injective (docs/security.md, "Keys built from
identifiers"): no two different tuples of ids, whatever characters they hold, and no two
kinds of key, ever name the same key."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import keys
from app.core.chunking import memory_id
from app.core.periods import job_key as summary_job_key
from app.core.periods import summary_id
from app.stores.changes import EVERYONE
from app.stores.generations import _key as generation_key
from app.stores.models import incarnation

# Ids full of the separators any encoding might trip on, and of anything else.
SEPARATORS = ":{}\x1f|./%@\\*?[]-_~+ \x00"
tricky = st.text(alphabet=st.sampled_from(SEPARATORS + "ab"), max_size=6)
anything = st.text(max_size=6)  # includes lone surrogates
ident = st.one_of(tricky, anything)
# The API's alphabet (user and session ids; tenants may hold more).
api_id = st.text(alphabet=st.sampled_from("ab:.@-_x1"), min_size=1, max_size=6)
seq = st.integers(min_value=0, max_value=10**6)


def names(t: str, u: str, s: str, extra: str, n: int, m: int) -> list[tuple[tuple[Any, ...], str]]:
    """Each key kind's name for these ids, tagged with what it was made of."""
    return [
        (("window", t, u, s), keys.window_key(t, u, s)),
        (("scratchpad", t, u, s), keys.scratchpad_key(t, u, s)),
        (("gen", t, u), keys.generation_key(t, u)),
        (("gen", t, u), generation_key((t, u))),
        (("ratelimit", t), keys.ratelimit_key(t)),
        (("indexed", t, u, s, n), keys.indexed_message(t, u, s, n)),
        (("facts", u, s, extra, n, m), keys.facts_job_key(u, s, extra, n, m)),
        # A fact's uuid5 name: the tenant and its job's key (app/services/facts.py).
        (("fact", t, u, s, extra, n, m), keys.join(t, keys.facts_job_key(u, s, extra, n, m))),
    ]


@settings(max_examples=400)
@given(
    st.lists(st.tuples(ident, ident, ident, ident, seq, seq), min_size=2, max_size=6, unique=True)
)
def test_no_two_tuples_or_kinds_share_a_key(tuples: list[tuple[Any, ...]]) -> None:
    seen: dict[str, tuple[Any, ...]] = {}
    for t in tuples:
        for made_of, name in names(*t):
            assert seen.setdefault(name, made_of) == made_of, (name, made_of, seen[name])
    # Everyone's change mark is no user's.
    assert generation_key(EVERYONE) not in seen


@given(st.lists(ident, min_size=1, max_size=5))
def test_a_join_splits_back(values: list[str]) -> None:
    assert keys.split(keys.join(*values)) == values
    assert all(c not in keys.part(v) for v in values for c in "/{}")


@given(ident, ident, ident, seq)
def test_an_indexed_message_reads_back(t: str, u: str, s: str, n: int) -> None:
    assert keys.parse_indexed(keys.indexed_message(t, u, s, n)) == (t, u, s, n)


@given(ident, ident)
def test_the_erasure_patterns_match_the_users_keys_only(t: str, u: str) -> None:
    import fnmatch

    def matches(name: str) -> bool:
        # Redis's glob, for these patterns: `*` anything, `\x` the character x.
        return any(fnmatch.fnmatchcase(name, _fn(p)) for p in keys.user_key_patterns(t, u))

    assert matches(keys.window_key(t, u, "s"))
    assert matches(keys.scratchpad_key(t, u, "s:1"))
    assert matches(keys.generation_key(t, u))
    for other_t, other_u in ((t + ":x", u), (t, u + ":x"), (t + "/" + u, ""), (t, u + "/s")):
        assert not matches(keys.window_key(other_t, other_u, "s"))
        assert not matches(keys.generation_key(other_t, other_u))


def _fn(pattern: str) -> str:
    out, escaped = [], False
    for c in pattern:
        if escaped:
            out.append(f"[{c}]")
            escaped = False
        elif c == "\\":
            escaped = True
        else:
            out.append(c)
    return "".join(out)


# Names kept in their earlier form (app/core/keys.py says why): injective over ids of the
# API's alphabet with any tenant.
AT = datetime(2026, 6, 1, 12, 30, tzinfo=UTC)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(ident, api_id, api_id, seq, st.sampled_from([AT.isoformat(), "2026-06-02"])),
        min_size=2,
        max_size=6,
        unique=True,
    )
)
def test_the_kept_names_are_injective(tuples: list[tuple[str, str, str, int, str]]) -> None:
    seen: dict[uuid.UUID | str, tuple[Any, ...]] = {}
    for t, u, s, n, inc in tuples:
        made: list[tuple[tuple[Any, ...], uuid.UUID | str]] = [
            (("memory", t, s, inc, n), memory_id(t, s, inc, n)),
            (("summary", t, u, n), summary_id(t, u, "daily", datetime.fromtimestamp(n, UTC))),
            (("summary-job", u, n), summary_job_key(u, "daily", date.fromordinal(n + 1))),
            (("essence-job", u), summary_job_key(u, "essence", None)),
        ]
        for made_of, name in made:
            assert seen.setdefault(name, made_of) == made_of


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(ident, api_id, api_id, st.booleans(), seq),
        min_size=2,
        max_size=6,
        unique_by=lambda t: (t[0], t[1], t[2], t[4]),
    )
)
def test_two_users_sessions_of_one_id_never_name_one_memory(
    tuples: list[tuple[str, str, str, bool, int]],
) -> None:
    """Sessions made since they are the user's name the user in their memories' ids (their
    incarnation); made at the same instant, two users' sessions of one id stay apart."""
    seen: dict[uuid.UUID, tuple[str, str, str, int]] = {}
    for t, u, s, by_user, n in tuples:
        if not by_user:
            continue
        name = memory_id(t, s, incarnation(AT, u, True), n)
        assert seen.setdefault(name, (t, u, s, n)) == (t, u, s, n)
    # An older session's memories keep the ids they have: no user in the name.
    assert memory_id("t", "s", incarnation(AT, "u", False), 1) == memory_id(
        "t", "s", AT.isoformat(), 1
    )
