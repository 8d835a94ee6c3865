"""Fact extraction and reconciliation as pure functions (docs/facts.md): the prompt of one
LLM call per promotion batch, the schema its answer must have, and the plan that turns
the answer into decisions — add, update (supersede), delete (end), none — keeping only
what the batch's messages support: nothing is invented.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from app.core.dedupe import content_hash

FactType = Literal["semantic", "procedural"]
Action = Literal["add", "update", "delete", "none"]
FACT_TYPES: tuple[FactType, ...] = ("semantic", "procedural")

FACT_NAMESPACE = uuid.UUID("6f1c3a52-0c7e-4d0e-9f55-2f9b8f7a51c3")

MAX_FACT_CHARS = 500
MAX_NAME_CHARS = 256
MAX_PREDICATE_CHARS = 128


# --- the LLM's answer -------------------------------------------------------------------


class ExtractedFact(BaseModel):
    action: Action = "add"
    content: str = Field(default="", max_length=MAX_FACT_CHARS)
    memory_type: FactType = "semantic"
    sources: list[int] = Field(default_factory=list, description="seq of the messages")
    target: str | None = Field(default=None, description="the existing fact's label, F1 …")
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    reason: str = Field(default="", max_length=1000)


class ExtractedTriple(BaseModel):
    subject: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    predicate: str = Field(min_length=1, max_length=MAX_PREDICATE_CHARS)
    object: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    subject_type: str | None = Field(default=None, max_length=64)
    object_type: str | None = Field(default=None, max_length=64)
    sources: list[int] = Field(default_factory=list)
    fact: int | None = Field(default=None, description="index of the fact it restates")


class Extraction(BaseModel):
    facts: list[ExtractedFact] = Field(default_factory=list)
    triples: list[ExtractedTriple] = Field(default_factory=list)


# --- the prompt -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchMessage:
    seq: int
    role: str
    content: str
    created_at: datetime
    source: dict[str, Any]  # {session_id, message_id, seq}, as memories cite it


@dataclass(frozen=True, slots=True)
class KnownFact:
    """An existing current fact the batch may confirm, replace or contradict."""

    id: uuid.UUID
    content: str
    memory_type: str
    valid_from: datetime | None


SYSTEM_PROMPT = """You maintain long-term facts about a user from their conversation.
From the NEW MESSAGES, extract durable facts: "semantic" (about the user, their life,
people, preferences, plans) or "procedural" (how the user wants things done). Write each
fact as one short standalone sentence in the language of the messages. Ignore small talk,
questions, and anything the messages do not state. Cite the seq of the messages that
state each fact in "sources".
Compare each fact with the EXISTING FACTS and choose an action:
- "add": new information;
- "update": it changes an existing fact (set "target" to its label, e.g. "F2");
- "delete": the messages say an existing fact is no longer true and give no replacement
  ("target" set, "content" the statement that ends it);
- "none": an existing fact already says it ("target" set).
Give a short "reason" for each decision and an "importance" in [0, 1].
Also list relations as triples {subject, predicate, object, subject_type?, object_type?,
sources, fact} where "fact" is the index of the fact they restate; use "user" for the user.
Answer with JSON only: {"facts": [...], "triples": [...]}."""


def label(n: int) -> str:
    return f"F{n + 1}"


def prompt(messages: Sequence[BatchMessage], known: Sequence[KnownFact]) -> list[dict[str, str]]:
    """The chat messages of the one extraction call of a batch."""
    body = {
        "existing_facts": [
            {
                "label": label(n),
                "content": f.content,
                "type": f.memory_type,
                "since": f.valid_from.date().isoformat() if f.valid_from else None,
            }
            for n, f in enumerate(known)
        ],
        "new_messages": [
            {
                "seq": m.seq,
                "role": m.role,
                "time": m.created_at.isoformat(),
                "content": m.content,
            }
            for m in messages
        ],
    }
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": orjson.dumps(body).decode()},
    ]


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """One reconciled fact. `target` is the existing fact an update, delete or none is
    about; `at` is the event time of its newest source message (when the change was said)."""

    action: Action
    content: str
    memory_type: FactType
    importance: float
    sources: list[dict[str, Any]]
    at: datetime
    target: uuid.UUID | None
    reason: str
    index: int  # the fact's position in the answer (triples refer to it)


@dataclass(frozen=True, slots=True)
class Triple:
    subject: str
    predicate: str
    object: str
    subject_type: str | None
    object_type: str | None
    sources: list[dict[str, Any]]
    at: datetime
    fact: int | None  # the index of the decision it restates


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: list[Decision]
    triples: list[Triple]
    dropped: list[str]  # why each rejected item was rejected (logged, counted)


def plan(
    extraction: Extraction, messages: Sequence[BatchMessage], known: Sequence[KnownFact]
) -> Plan:
    """Keep what the batch supports: a fact needs a source among the batch's messages, an
    update/delete/none a target among the existing facts shown, and each existing fact is
    decided at most once (the first decision wins). An "add" that repeats an existing fact
    word for word is a "none"; an "update" to the same words is a "none" too."""
    by_seq = {m.seq: m for m in messages}
    by_label = {label(n): f for n, f in enumerate(known)}
    by_hash = {content_hash(f.content): f for f in known}
    decided: set[uuid.UUID] = set()
    seen_new: set[str] = set()
    decisions: list[Decision] = []
    dropped: list[str] = []
    for n, fact in enumerate(extraction.facts):
        cited = [by_seq[s] for s in dict.fromkeys(fact.sources) if s in by_seq]
        content = " ".join(fact.content.split())
        if not cited:
            dropped.append(f"fact {n}: no source among the batch's messages")
            continue
        action: Action = fact.action
        target = by_label.get(fact.target) if fact.target else None
        if action == "add" and content and content_hash(content) in by_hash:
            action, target = "none", by_hash[content_hash(content)]
        if action != "add" and target is None:
            dropped.append(f"fact {n}: {action} without a known target")
            continue
        if (
            action == "update"
            and target is not None
            and content_hash(content) == content_hash(target.content)
        ):
            action = "none"
        if action in ("add", "update") and not content:
            dropped.append(f"fact {n}: {action} without content")
            continue
        if target is not None:
            if target.id in decided:
                dropped.append(f"fact {n}: {target.content!r} already decided")
                continue
            decided.add(target.id)
        if action in ("add", "update"):
            key = content_hash(content)
            if key in seen_new:
                dropped.append(f"fact {n}: repeated")
                continue
            seen_new.add(key)
        decisions.append(
            Decision(
                action=action,
                content=content,
                memory_type=fact.memory_type,
                importance=fact.importance,
                sources=[m.source for m in cited],
                at=max(m.created_at for m in cited),
                target=target.id if target is not None else None,
                reason=fact.reason.strip() or "(no reason given)",
                index=n,
            )
        )
    triples = _keep_triples(extraction, by_seq, decisions, dropped)
    return Plan(decisions, triples, dropped)


def _keep_triples(
    extraction: Extraction,
    by_seq: Mapping[int, BatchMessage],
    decisions: Sequence[Decision],
    dropped: list[str],
) -> list[Triple]:
    """The triples with a source in the batch (their own, else their kept fact's); the
    others are noted in `dropped`."""
    kept = {d.index for d in decisions}
    triples: list[Triple] = []
    for n, t in enumerate(extraction.triples):
        cited = [by_seq[s] for s in dict.fromkeys(t.sources) if s in by_seq]
        if not cited and t.fact is not None and t.fact in kept:
            decision = next(d for d in decisions if d.index == t.fact)
            cited = [by_seq[s["seq"]] for s in decision.sources if s["seq"] in by_seq]
        if not cited:
            dropped.append(f"triple {n}: no source among the batch's messages")
            continue
        triples.append(
            Triple(
                subject=t.subject.strip(),
                predicate=t.predicate.strip(),
                object=t.object.strip(),
                subject_type=t.subject_type,
                object_type=t.object_type,
                sources=[m.source for m in cited],
                at=max(m.created_at for m in cited),
                fact=t.fact if t.fact in kept else None,
            )
        )
    return triples


def fact_id(job_key: str, content: str) -> uuid.UUID:
    """A new fact's id: the same batch stating the same fact yields the same id, so a
    re-run job writes nothing twice. `job_key` names the batch injectively (the tenant and
    the job's key, encoded by `app.core.keys`: no `\x1f` in it; a job queued before that
    passes its old key, which has one, so old and new names never meet)."""
    return uuid.uuid5(FACT_NAMESPACE, f"{job_key}\x1f{content_hash(content)}")


def ended_at(start: datetime | None, at: datetime) -> datetime:
    """When an old fact stops: the change's event time, never before the fact began."""
    return max(start, at) if start is not None else at
