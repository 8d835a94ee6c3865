"""`strata import`: reads a history file (JSON Lines of messages, Strata's own export, or a
Mem0 export) as messages, sends them in batches, and keeps a checkpoint so that an
interrupted import resumes where the service last confirmed (docs/cli.md).

Every message carries a client id (its own, or one derived from where it sits in the file),
and the ingest API counts a known client id as a duplicate: resending the batch that was in
flight when the import stopped stores nothing twice.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import TypeAdapter, ValidationError

from app.schemas.common import Identifier
from app.schemas.ingest import MessageIn

Format = Literal["auto", "jsonl", "strata", "mem0"]
DEFAULT_SESSION = "imported"
MEM0_SESSION = "mem0"
CHECKPOINT_SUFFIX = ".strata-import.json"

_identifier: TypeAdapter[str] = TypeAdapter(Identifier)


class ImportFileError(Exception):
    """The file cannot be read as the format says; the message names the line or record."""


@dataclass(frozen=True, slots=True)
class Position:
    """How far the import got: records read, and for JSON Lines the byte offset and line."""

    records: int = 0
    offset: int = 0
    line: int = 0


@dataclass(frozen=True, slots=True)
class Record:
    session_id: str
    message: MessageIn
    end: Position  # the position just after this record


@dataclass(frozen=True, slots=True)
class SessionHead:
    """A session as Strata's export describes it, created before its messages."""

    session_id: str
    system_prompt: str | None
    metadata: dict[str, Any]


@dataclass(slots=True)
class Batch:
    session_id: str
    messages: list[MessageIn] = field(default_factory=list)
    chars: int = 0
    size: int = 0
    end: Position = Position()


def derived_id(*parts: object) -> str:
    """The client id of a message the file gives none: the same place in the same file
    gives the same id on every run."""
    digest = hashlib.blake2b(digest_size=12)
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    return f"imp-{digest.hexdigest()}"


def _message(raw: dict[str, Any], where: str) -> MessageIn:
    try:
        return MessageIn.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors()
        )
        raise ImportFileError(f"{where}: {problems}") from None


def _session(value: Any, default: str, where: str) -> str:
    if value is None:
        return default
    try:
        return _identifier.validate_python(value)
    except ValidationError:
        raise ImportFileError(f"{where}: session_id {value!r} is not a valid id") from None


class Source:
    """A file's messages in order, from a position on."""

    format: str
    total: int  # records in the file

    def sessions(self) -> list[SessionHead]:
        return []

    def records(self, start: Position) -> Iterator[Record]:
        raise NotImplementedError

    def digest(self, upto: Position) -> str:
        """What the checkpoint compares: the file as read up to `upto`."""
        raise NotImplementedError


class JsonLinesSource(Source):
    """One message a line: {session_id?, id?, role, content, created_at?, metadata?}."""

    format = "jsonl"

    def __init__(self, path: Path, default_session: str) -> None:
        self.path = path
        self.default_session = default_session
        with path.open("rb") as f:
            self.total = sum(1 for line in f if line.strip())
        # The hash of the file up to the end of each record read and not yet checkpointed:
        # the batching reads one record past the batch it sends.
        self._marks: dict[int, Any] = {}

    def records(self, start: Position) -> Iterator[Record]:
        running = self._prefix_hash(start.offset)
        with self.path.open("rb") as f:
            f.seek(start.offset)
            records, offset, number = start.records, start.offset, start.line
            for line in f:
                number += 1
                offset += len(line)
                running.update(line)
                if not line.strip():
                    continue
                records += 1
                self._marks[offset] = running.copy()
                yield Record(*self._parse(line, number), Position(records, offset, number))

    def _parse(self, line: bytes, number: int) -> tuple[str, MessageIn]:
        where = f"{self.path.name}:{number}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ImportFileError(f"{where}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ImportFileError(f"{where}: not a JSON object")
        session = _session(raw.pop("session_id", None), self.default_session, where)
        if raw.get("id") is None:
            raw["id"] = derived_id("line", number, line.rstrip(b"\r\n"))
        return session, _message(raw, where)

    def _prefix_hash(self, upto: int) -> Any:
        running = hashlib.sha256()
        with self.path.open("rb") as f:
            while upto > 0:
                chunk = f.read(min(1 << 20, upto))
                if not chunk:
                    break
                running.update(chunk)
                upto -= len(chunk)
        return running

    def digest(self, upto: Position) -> str:
        mark = self._marks.get(upto.offset)
        if mark is None:
            return str(self._prefix_hash(upto.offset).hexdigest())
        for offset in [o for o in self._marks if o <= upto.offset]:
            del self._marks[offset]  # checkpoints only move forward
        return str(mark.hexdigest())


class DocumentSource(Source):
    """A whole JSON document read at once (Strata's export, Mem0's); positions count
    records."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self._digest = hashlib.sha256(data).hexdigest()
        self._records: list[tuple[str, MessageIn]] = []
        self.total = 0

    def records(self, start: Position) -> Iterator[Record]:
        for i in range(start.records, len(self._records)):
            session, message = self._records[i]
            yield Record(session, message, Position(records=i + 1))

    def digest(self, upto: Position) -> str:
        return self._digest


class StrataSource(DocumentSource):
    """`GET /v1/users/{id}/export`: its sessions (system prompt, metadata) and their
    messages. Memories, summaries and the graph are not imported: the service derives them
    again from the messages."""

    format = "strata"

    def __init__(self, path: Path, data: bytes, doc: dict[str, Any]) -> None:
        super().__init__(path, data)
        self._heads: list[SessionHead] = []
        for s, session in enumerate(doc.get("sessions") or []):
            where = f"{path.name}: sessions[{s}]"
            if not isinstance(session, dict):
                raise ImportFileError(f"{where}: not an object")
            sid = _session(session.get("id"), DEFAULT_SESSION, where)
            self._heads.append(
                SessionHead(sid, session.get("system_prompt"), session.get("metadata") or {})
            )
            for m, msg in enumerate(session.get("messages") or []):
                here = f"{where}.messages[{m}]"
                if not isinstance(msg, dict):
                    raise ImportFileError(f"{here}: not an object")
                raw = {k: msg.get(k) for k in ("id", "role", "content", "created_at", "metadata")}
                if raw["id"] is None:
                    raw["id"] = derived_id("seq", sid, msg.get("seq", m))
                if raw["metadata"] is None:
                    del raw["metadata"]
                self._records.append((sid, _message(raw, here)))
        self.total = len(self._records)

    def sessions(self) -> list[SessionHead]:
        return self._heads


class Mem0Source(DocumentSource):
    """Mem0's `get_all` (a list, or `{"results": [...]}`) of memories: each one becomes a
    user message of the session named by its `run_id` (or the default), with its creation
    time and id, its other fields kept under `metadata.mem0`; promotion then makes memories
    of them, dated by that time. Oldest first."""

    format = "mem0"
    KEPT = ("id", "hash", "updated_at", "categories", "agent_id", "run_id", "user_id")

    def __init__(self, path: Path, data: bytes, doc: Any, default_session: str) -> None:
        super().__init__(path, data)
        items = doc.get("results", doc.get("memories")) if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise ImportFileError(f"{path.name}: no list of memories (`results`)")
        found: list[tuple[str, int, tuple[str, MessageIn]]] = []
        for i, item in enumerate(items):
            where = f"{path.name}: memory {i}"
            if not isinstance(item, dict):
                raise ImportFileError(f"{where}: not an object")
            content = item.get("memory", item.get("text"))
            run = item.get("run_id")
            session = default_session if run is None else _session(run, default_session, where)
            mem0 = {k: item[k] for k in self.KEPT if item.get(k) is not None}
            given = item.get("metadata")
            metadata: dict[str, Any] = given if isinstance(given, dict) else {}
            raw: dict[str, Any] = {
                "id": _mem0_id(item.get("id"), i, content),
                "role": "user",
                "content": content,
                "metadata": {**metadata, "mem0": mem0},
            }
            created = _aware(item.get("created_at"))
            if created is not None:
                raw["created_at"] = created
            found.append((created or "", i, (session, _message(raw, where))))
        found.sort(key=lambda f: (_instant(f[0]), f[1]))
        self._records = [r for _, _, r in found]
        self.total = len(self._records)


def _mem0_id(value: Any, index: int, content: Any) -> str:
    if isinstance(value, str) and not value.startswith("seq:"):
        try:
            return _identifier.validate_python(value)
        except ValidationError:
            pass
    return derived_id("mem0", index, value, content)


def _aware(value: Any) -> str | None:
    """Mem0 writes times with an offset; a time without one is read as UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value  # left for the message's own validation to name
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).isoformat()


def _instant(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def open_source(path: Path, fmt: Format, default_session: str | None) -> Source:
    """The file read as `fmt`; `auto` tells by its extension, then by its first line."""
    if fmt == "auto":
        fmt = _sniff(path)
    if fmt == "jsonl":
        return JsonLinesSource(path, default_session or DEFAULT_SESSION)
    data = path.read_bytes()
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ImportFileError(f"{path.name}: not a JSON document ({exc})") from None
    if fmt == "strata":
        if not isinstance(doc, dict) or "sessions" not in doc:
            raise ImportFileError(f"{path.name}: not a Strata export (no `sessions`)")
        return StrataSource(path, data, doc)
    return Mem0Source(path, data, doc, default_session or MEM0_SESSION)


def _sniff(path: Path) -> Format:
    if path.suffix.lower() in {".jsonl", ".ndjson"}:
        return "jsonl"
    with path.open("rb") as f:
        first = f.readline()
        rest = f.read(4096).strip()
    head = first.strip()
    if head.startswith(b"["):
        return "mem0"
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError:
        doc = None  # an indented document: its first line is not JSON in itself
    if isinstance(doc, dict) and rest:
        return "jsonl"  # a whole object on the first line, and more after it
    if doc is None:
        doc = orjson.loads(path.read_bytes())
    if isinstance(doc, dict) and "sessions" in doc and "format" in doc:
        return "strata"
    if isinstance(doc, list) or (isinstance(doc, dict) and ("results" in doc)):
        return "mem0"
    if isinstance(doc, dict) and "role" in doc:
        return "jsonl"  # a file of one message
    raise ImportFileError(f"{path.name}: cannot tell its format; pass --format")


def batches(
    records: Iterator[Record], *, max_messages: int, max_chars: int, max_bytes: int
) -> Iterator[Batch]:
    """Consecutive messages of one session, within the ingest limits of one call."""
    batch: Batch | None = None
    try:
        for record in records:
            batch = yield from _add(batch, record, max_messages, max_chars, max_bytes)
    except ImportFileError:
        if batch is not None:
            yield batch  # what came before the bad record is imported, then the error
        raise
    if batch is not None:
        yield batch


def _add(
    batch: Batch | None, record: Record, max_messages: int, max_chars: int, max_bytes: int
) -> Generator[Batch, None, Batch]:
    """Yields the batch that `record` does not fit in; returns the one it is in."""
    chars = len(record.message.content)
    size = len(record.message.model_dump_json(exclude_none=True))
    if batch is not None and (
        record.session_id != batch.session_id
        or len(batch.messages) >= max_messages
        or batch.chars + chars > max_chars
        or batch.size + size > max_bytes
    ):
        yield batch
        batch = None
    if batch is None:
        batch = Batch(record.session_id)
    batch.messages.append(record.message)
    batch.chars += chars
    batch.size += size
    batch.end = record.end
    return batch


@dataclass(slots=True)
class Checkpoint:
    """`<file>.strata-import.json`: where the import stands, written after each confirmed
    batch. It applies to the same file (its bytes so far), format, user and target only."""

    path: Path
    identity: dict[str, str]

    @classmethod
    def beside(cls, source: Path, identity: dict[str, str]) -> Checkpoint:
        return cls(source.with_name(source.name + CHECKPOINT_SUFFIX), identity)

    def load(self, source: Source) -> Position:
        try:
            state = orjson.loads(self.path.read_bytes())
            position = Position(**state["position"])
            if state["identity"] != self.identity:
                return Position()
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return Position()
        if source.digest(position) != state["digest"]:
            return Position()  # the file changed: start over, the ids make that harmless
        return position

    def save(self, source: Source, position: Position) -> None:
        state = {
            "identity": self.identity,
            "position": asdict(position),
            "digest": source.digest(position),
            "saved_at": datetime.now(UTC).isoformat(),
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(orjson.dumps(state, option=orjson.OPT_INDENT_2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass(slots=True)
class Tally:
    """What this run did; read by the caller even when the run is interrupted."""

    start: Position = Position()
    confirmed: Position = Position()
    accepted: int = 0
    duplicates: int = 0

    @property
    def sent(self) -> int:
        return self.confirmed.records - self.start.records


SendBatch = Callable[[str, list[MessageIn]], Awaitable[tuple[int, int]]]


async def run_import(
    source: Source,
    checkpoint: Checkpoint,
    tally: Tally,
    send: SendBatch,
    *,
    start: Position,
    max_messages: int = 500,
    max_chars: int = 200_000,
    max_bytes: int = 1_500_000,
    after_batch: Callable[[Tally], None] | None = None,
) -> None:
    """Send the file's batches from the checkpoint on; the checkpoint moves after each
    batch the service confirmed (`send` answers accepted and duplicates); `start` is
    where the checkpoint stood (`Checkpoint.load`)."""
    tally.start = tally.confirmed = start
    for batch in batches(
        source.records(tally.start),
        max_messages=max_messages,
        max_chars=max_chars,
        max_bytes=max_bytes,
    ):
        accepted, duplicates = await send(batch.session_id, batch.messages)
        tally.accepted += accepted
        tally.duplicates += duplicates
        tally.confirmed = batch.end
        checkpoint.save(source, batch.end)
        if after_batch is not None:
            after_batch(tally)
    checkpoint.clear()
