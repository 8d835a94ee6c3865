"""Which users a committed write may have changed for context's cached reads.

Context reads each user's profile (attributes and current facts) and older summaries on
every call; `app.services.context_cache` keeps them between calls and drops them when a
write could have changed them. Rather than trusting every write path to say so, the
read-write session watches its own statements (`watch`): a statement or flush that touches
what those reads show records the user it wrote for, and `Database` announces the users
after the commit (never before: a reader must not cache the old rows under the new
generation).

The rule is safe by default: a write this module cannot place (no literal tenant and user
in its WHERE clause or rows, a textual statement, an unknown form) counts for everyone
(`EVERYONE`), which only costs cache hits. Only writes that cannot change what context
shows are ignored: memories of non-fact types inserted (promotion's episodic turns),
updates that set none of the columns a fact shows or is filtered by (reinforcement's use
counts, forgetting's marks), and users' rows written without their `profile`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction
from sqlalchemy.sql.elements import BinaryExpression, BindParameter, BooleanClauseList, Grouping

from app.stores.models import Memory, Summary, User

# (tenant_id, user_id); EVERYONE when the write could not be placed. None, not a pair of
# strings: no user's ids, whatever they hold, can be everyone's (tests/unit/test_key_names.py).
Scope = tuple[str, str] | None
EVERYONE: Scope = None

FACT_TYPES = frozenset({"semantic", "procedural"})
# What a fact in context shows, or is selected by (`memories.current_facts`).
_FACT_COLUMNS = frozenset(
    {
        "id",
        "tenant_id",
        "user_id",
        "memory_type",
        "content",
        "importance",
        "valid_from",
        "valid_to",
        "created_at",
        "sources",
        "deleted_at",
    }
)
_USER_COLUMNS = frozenset({"tenant_id", "id", "profile"})
# The user's own column per watched table.
_OWNER = {"memories": "user_id", "summaries": "user_id", "users": "id"}
_INFO_KEY = "strata.changed"


def watch(session_class: type[Session]) -> None:
    """Record, in each session's `info`, the scopes its writes touched (`taken`)."""
    event.listen(session_class, "do_orm_execute", _on_execute)
    event.listen(session_class, "after_flush", _on_flush)


def taken(session: Session) -> set[Scope]:
    """The scopes recorded since the last call (the session's transaction's)."""
    return session.info.pop(_INFO_KEY, None) or set()


def _record(session: Session, scopes: Iterable[Scope]) -> None:
    found = set(scopes)
    if found:
        session.info.setdefault(_INFO_KEY, set()).update(found)


def _on_execute(state: ORMExecuteState) -> None:
    if state.is_select:
        return
    _record(state.session, statement_scopes(state.statement, state.parameters))


def statement_scopes(statement: Any, parameters: Any = None) -> set[Scope]:
    """The scopes one executed statement may have changed (public for its tests)."""
    if isinstance(statement, sa.TextClause):
        # Textual SQL is not parsed: any that may write a watched table counts for everyone.
        text = statement.text.lower()
        written = any(verb in text for verb in ("insert", "update", "delete", "replace"))
        return {EVERYONE} if written and any(t in text for t in _OWNER) else set()
    table = getattr(statement, "table", None)
    name = getattr(table, "name", None)
    if not isinstance(statement, sa.Insert | sa.Update | sa.Delete):
        return set()
    if name not in _OWNER:
        return set()
    params = _param_rows(parameters)
    if isinstance(statement, sa.Insert):
        # An upsert may change an existing row whatever its new row holds: no row is skipped.
        clause = getattr(statement, "_post_values_clause", None)
        upsert = clause is not None and "DoNothing" not in type(clause).__name__
        return _insert_scopes(statement, name, params, skip_unshown=not upsert)
    if isinstance(statement, sa.Update):
        if not _sets_shown(statement, name, params):
            return set()
        if name != "users" and _moves_owner(statement, params):
            return {EVERYONE}
    return {_where_scope(statement, name, params)}


def _param_rows(parameters: Any) -> list[Mapping[str, Any]]:
    if isinstance(parameters, Mapping):
        return [parameters]
    if isinstance(parameters, Sequence) and not isinstance(parameters, str | bytes):
        return [p for p in parameters if isinstance(p, Mapping)]
    return []


def _key(column: Any) -> str:
    return str(getattr(column, "key", column))


def _value(value: Any, params: Mapping[str, Any]) -> Any:
    if isinstance(value, BindParameter):
        return params.get(value.key, value.value) if value.key in params else value.value
    return value


def _statement_rows(statement: Any) -> list[dict[str, Any]]:
    """The rows an INSERT carries in itself: `values(**row)` or `values([rows])`. SQLAlchemy
    keeps them in `_values` / `_multi_values`; a form it keeps elsewhere yields none, and
    the insert counts for everyone."""
    multi = getattr(statement, "_multi_values", None) or ()
    rows = [{_key(k): v for k, v in r.items()} for group in multi for r in group]
    single = getattr(statement, "_values", None)
    if single:
        rows.append({_key(k): v for k, v in single.items()})
    return rows


def _insert_scopes(
    statement: sa.Insert, table: str, params: list[Mapping[str, Any]], *, skip_unshown: bool
) -> set[Scope]:
    rows = _statement_rows(statement) or [dict(p) for p in params]
    if not rows:
        return {EVERYONE}
    scopes: set[Scope] = set()
    for row in rows:
        p = params[0] if len(params) == 1 else {}
        values = {k: _value(v, p) for k, v in row.items()}
        memory_type = values.get("memory_type")
        episodic = isinstance(memory_type, str) and memory_type not in FACT_TYPES
        if skip_unshown and table == "memories" and episodic:
            continue  # an episodic turn: never in the profile
        if skip_unshown and table == "users" and not values.get("profile"):
            continue  # a user first seen: an empty profile reads as no profile
        tenant, user = values.get("tenant_id"), values.get(_OWNER[table])
        placed = isinstance(tenant, str) and isinstance(user, str)
        scopes.add((tenant, user) if placed else EVERYONE)  # type: ignore[arg-type]
    return scopes


def _sets_shown(statement: sa.Update, table: str, params: list[Mapping[str, Any]]) -> bool:
    """Whether the UPDATE may set a column context shows (a form we cannot read: yes)."""
    values = getattr(statement, "_values", None)
    columns = {_key(k) for k in values} if values else {k for p in params for k in p}
    if not columns:
        return True
    if table == "summaries":
        return True
    shown = _USER_COLUMNS if table == "users" else _FACT_COLUMNS
    return bool(columns & shown)


def _moves_owner(statement: sa.Update, params: list[Mapping[str, Any]]) -> bool:
    """An UPDATE that sets the tenant or the user changes two users' reads."""
    values = getattr(statement, "_values", None)
    columns = {_key(k) for k in values} if values else {k for p in params for k in p}
    return bool(columns & {"tenant_id", "user_id"})


def _where_scope(statement: Any, table: str, params: list[Mapping[str, Any]]) -> Scope:
    """The tenant and user a WHERE clause pins by equality to literal values, among the
    terms it ANDs at its top (an equality under an OR, a NOT or a subquery pins nothing);
    EVERYONE when it pins neither or several rows' parameters differ."""
    where = getattr(statement, "whereclause", None)
    if where is None:
        return EVERYONE
    found: dict[str, set[Any]] = {"tenant_id": set(), _OWNER[table]: set()}
    rows = params or [{}]
    for node in _conjuncts(where):
        if not isinstance(node, BinaryExpression) or node.operator is not sa.sql.operators.eq:
            continue
        column, bound = node.left, node.right
        if isinstance(column, BindParameter):
            column, bound = bound, column
        name = getattr(column, "key", None)
        if name in found and isinstance(bound, BindParameter):
            for p in rows:
                found[name].add(_value(bound, p))
    tenant, user = found["tenant_id"], found[_OWNER[table]]
    if len(tenant) == 1 and len(user) == 1:
        t, u = next(iter(tenant)), next(iter(user))
        if isinstance(t, str) and isinstance(u, str):
            return (t, u)
    return EVERYONE


def _conjuncts(clause: Any) -> list[Any]:
    """The terms of a clause's top-level AND (the clause itself when it is no AND)."""
    if isinstance(clause, BooleanClauseList) and clause.operator is sa.sql.operators.and_:
        return [term for c in clause.clauses for term in _conjuncts(c)]
    if isinstance(clause, Grouping):
        return _conjuncts(clause.element)
    return [clause]


def _on_flush(session: Session, _ctx: UOWTransaction) -> None:
    scopes: set[Scope] = set()
    for obj in session.new:
        if (isinstance(obj, Memory) and obj.memory_type in FACT_TYPES) or isinstance(obj, Summary):
            scopes.add((obj.tenant_id, obj.user_id))
        elif isinstance(obj, User) and obj.profile:
            scopes.add((obj.tenant_id, obj.id))
    for obj in session.dirty:
        if (isinstance(obj, Memory) and _changed(obj, _FACT_COLUMNS)) or isinstance(obj, Summary):
            scopes.add((obj.tenant_id, obj.user_id))
        elif isinstance(obj, User) and _changed(obj, _USER_COLUMNS):
            scopes.add((obj.tenant_id, obj.id))
    for obj in session.deleted:
        if isinstance(obj, Memory | Summary):
            scopes.add((obj.tenant_id, obj.user_id))
        elif isinstance(obj, User):
            scopes.add((obj.tenant_id, obj.id))
    _record(session, scopes)


def _changed(obj: Any, columns: frozenset[str]) -> bool:
    state = sa.inspect(obj)
    return any(state.attrs[c].history.has_changes() for c in columns if c in state.attrs)
