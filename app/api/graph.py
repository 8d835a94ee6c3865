"""The knowledge graph: triples in, entity look-up, neighbours within 1–3 hops."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.api.deps import GraphDep, TenantDep, UserIdPath
from app.api.errors import problem_responses
from app.errors import BadRequest, EntityNotFound, InvalidCursor, UserErasureInProgress
from app.schemas.common import IsoDatetime, Text
from app.schemas.graph import EntityPage, Neighborhood, TriplesIn, TriplesOut

router = APIRouter(prefix="/v1", tags=["graph"])


@router.post(
    "/users/{user_id}/graph/triples",
    summary="Record relations (subject, predicate, object)",
    description="Entities are created on first mention (names compared case-folded); a "
    "relation already current is not repeated (`existing`).",
    status_code=status.HTTP_201_CREATED,
    response_model=TriplesOut,
    responses=problem_responses(BadRequest, UserErasureInProgress),
)
async def add_triples(
    user_id: UserIdPath, body: TriplesIn, tenant: TenantDep, graph: GraphDep
) -> TriplesOut:
    return await graph.add_triples(tenant, user_id, body)


@router.get(
    "/users/{user_id}/graph/entities",
    summary="A user's entities whose name contains `q`",
    description="Exact matches first, then shorter names; `next_cursor`, passed as `cursor` "
    "with the same `q`, gives the next page.",
    response_model=EntityPage,
    responses=problem_responses(InvalidCursor),
)
async def list_entities(
    user_id: UserIdPath,
    tenant: TenantDep,
    graph: GraphDep,
    q: Annotated[str | None, Text(256), Query(description="part of a name")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Text(512), Query(description="from `next_cursor`")] = None,
) -> EntityPage:
    return await graph.entities(tenant, user_id, q, limit=limit, cursor=cursor)


@router.get(
    "/users/{user_id}/graph/neighbors",
    summary="Entities within `depth` hops of one, and the relations between them",
    description="Relations in either direction that hold at `as_of` (default: now, i.e. "
    "not ended); each entity at its shortest distance.",
    response_model=Neighborhood,
    responses=problem_responses(EntityNotFound),
)
async def get_neighbors(
    user_id: UserIdPath,
    tenant: TenantDep,
    graph: GraphDep,
    entity: Annotated[str, Text(256, min_length=1), Query(description="name or id")],
    depth: Annotated[int, Query(ge=1, le=3)] = 1,
    as_of: Annotated[IsoDatetime | None, Query(description="valid time")] = None,
) -> Neighborhood:
    return await graph.neighbors(tenant, user_id, entity, depth=depth, as_of=as_of)
