"""What a purge of a store's files after an erasure achieved (docs/privacy.md, "What stays
on disk"): `done` only when it was verified, and otherwise why not, naming what to change."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Purged:
    done: bool
    reason: str | None = None
