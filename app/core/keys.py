"""The one encoder of every key the service builds from identifiers (docs/security.md,
"Keys built from identifiers"): Redis keys, signal payloads, job keys.

Each identifier is one *part*: percent-encoded (UTF-8; a lone surrogate passes through as
its bytes) except for `[A-Za-z0-9._~:@+-]`, so an id of the API's alphabet reads as it is
while `%`, the separator `/`, Redis Cluster's hash-tag braces `{` `}` and every other
character are escaped. Parts are joined by `/`, which no encoded part contains: a key is
injective over the tuple of its parts, whatever characters a tenant, user or session id
holds. Each key kind has its own fixed prefix and suffix outside the parts, so two kinds
never share a key either. Pure functions, no I/O.

Names that keep their earlier form, because each is already unambiguous and changing it
would rename data that exists:
- memory ids (`app.core.chunking.memory_id`): uuid5 of `tenant \\x1f session \\x1f
  incarnation \\x1f seq`; only the tenant may hold `\\x1f` (session ids, incarnations and
  numbers cannot), so the name splits one way from the right. The incarnation
  (`app.stores.models.incarnation`) is the session's creation time and, for sessions made
  since sessions are the user's, the user's id escaped by `part`: two users' sessions of
  one id never name one memory, and older sessions' memories keep their ids;
- summary ids and summary job keys (`app.core.periods`): the user id, level and period
  after the tenant contain no `/`, and the level and day no `:` or `@`.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

SEP = "/"
_SAFE = "._~:@+-"  # with ASCII letters and digits, which `quote` never escapes


def part(value: str) -> str:
    """One identifier, escaped: never holds `/`, `{`, `}` or `%` unescaped."""
    return quote(value, safe=_SAFE, encoding="utf-8", errors="surrogatepass")


def join(*values: str) -> str:
    """Identifiers joined, injectively: `split(join(*v)) == list(v)`."""
    return SEP.join(part(v) for v in values)


def split(text: str) -> list[str]:
    """The identifiers of `join`."""
    return [unquote(p, encoding="utf-8", errors="surrogatepass") for p in text.split(SEP)]


def session_tag(tenant_id: str, user_id: str, session_id: str) -> str:
    """A session's Redis Cluster hash tag: its keys share one slot."""
    return "{" + join(tenant_id, user_id, session_id) + "}"


def window_key(tenant_id: str, user_id: str, session_id: str) -> str:
    """The session's recent window (app/stores/buffer.py)."""
    return f"strata:{session_tag(tenant_id, user_id, session_id)}:window"


def scratchpad_key(tenant_id: str, user_id: str, session_id: str) -> str:
    """The session's scratchpad, in the window's slot."""
    return f"strata:{session_tag(tenant_id, user_id, session_id)}:scratchpad"


def generation_key(tenant_id: str, user_id: str) -> str:
    """A user's change mark for context's cached reads (app/stores/generations.py)."""
    return "strata:gen:{" + join(tenant_id, user_id) + "}"


# The mark of a write that could not be placed: no user's key can be this (theirs have braces).
GENERATION_EVERYONE = "strata:gen:*"


def ratelimit_key(bucket: str) -> str:
    """An API key's token bucket (app/stores/ratelimit.py)."""
    return "strata:ratelimit:{" + part(bucket) + "}"


def indexed_message(tenant_id: str, user_id: str, session_id: str, seq: int) -> str:
    """The payload of "a session is indexed up to seq" (app/stores/signals.py)."""
    return join(tenant_id, user_id, session_id, str(seq))


def parse_indexed(text: str) -> tuple[str, str, str, int] | None:
    """`indexed_message`'s parts; None for anything else."""
    parts = split(text)
    if len(parts) != 4 or not parts[3].isdigit():
        return None
    return parts[0], parts[1], parts[2], int(parts[3])


def facts_job_key(
    user_id: str, session_id: str, incarnation: str, from_seq: int, to_seq: int
) -> str:
    """A batch's extraction job (app/services/facts.py), within its tenant's jobs."""
    return join("facts", user_id, session_id, incarnation, f"{from_seq}-{to_seq}")


def user_key_patterns(tenant_id: str, user_id: str) -> list[str]:
    """Redis SCAN MATCH patterns of every key naming the user: their sessions' windows and
    scratchpads, and their change mark. Encoded parts hold none of the glob's `*?[]\\`."""
    tag = join(tenant_id, user_id)
    return [f"strata:{{{tag}/*}}:*", f"strata:gen:{{{tag}}}"]
