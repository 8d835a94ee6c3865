"""A user's knowledge graph: entities and bi-temporal relations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import TEXT_RULES, EventTime, Source, StrictModel, Text

Name = Annotated[str, Text(256, min_length=1, strip=True)]
Predicate = Annotated[str, Text(128, min_length=1, strip=True)]
EntityType = Annotated[str, Text(64, min_length=1, strip=True)]


class TripleIn(StrictModel):
    subject: Name
    predicate: Predicate = Field(
        description=f'stored as lower snake case ("lives_in"); {TEXT_RULES}'
    )
    object: Name
    subject_type: EntityType | None = None
    object_type: EntityType | None = None
    valid_from: EventTime | None = Field(
        default=None,
        description="when it became true; at most 5 minutes ahead of the server's clock",
    )
    valid_to: EventTime | None = Field(
        default=None,
        description="when it stopped being true; after `valid_from`; at most 5 minutes "
        "ahead of the server's clock",
    )

    @model_validator(mode="after")
    def _ordered(self) -> TripleIn:
        start, end = self.valid_from, self.valid_to
        if start is not None and end is not None and start >= end:
            raise ValueError("`valid_to` must be after `valid_from`")
        return self


class TriplesIn(StrictModel):
    triples: list[TripleIn] = Field(min_length=1, max_length=500)

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "triples": [
                        {"subject": "user", "predicate": "sister", "object": "Anna"},
                        {"subject": "Anna", "predicate": "lives_in", "object": "Berlin"},
                    ]
                }
            ]
        }
    }


class EntityOut(BaseModel):
    id: uuid.UUID
    name: str
    entity_type: str | None
    learned_at: datetime


class RelationOut(BaseModel):
    id: uuid.UUID
    subject: str
    predicate: str
    object: str
    valid_from: datetime | None
    valid_to: datetime | None
    learned_at: datetime
    memory_id: uuid.UUID | None = Field(description="the extracted fact it restates")
    sources: list[Source]


class TriplesOut(BaseModel):
    created: int = Field(description="relations written")
    existing: int = Field(description="relations already known and current (not repeated)")
    relations: list[RelationOut]


class EntityPage(BaseModel):
    items: list[EntityOut]
    next_cursor: str | None


class NeighborOut(EntityOut):
    depth: int = Field(description="hops from the entity asked about (0: itself)")


class Neighborhood(BaseModel):
    entity: EntityOut
    depth: int
    nodes: list[NeighborOut]
    relations: list[RelationOut]
