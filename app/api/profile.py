"""Profiles: a user's structured attributes (JSON merge-patch) and learned facts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.api.deps import ProfileDep, TenantDep, UserIdPath
from app.api.errors import problem_responses
from app.errors import BadRequest, ProfileTooLarge, UserErasureInProgress
from app.schemas.common import JsonObject
from app.schemas.profile import Profile

router = APIRouter(prefix="/v1", tags=["profile"])

MergePatch = Annotated[
    JsonObject,
    Body(
        media_type="application/merge-patch+json",
        description="JSON merge-patch (RFC 7396) of the attributes: a member set to null is "
        "removed, an object merges member by member, anything else replaces. "
        "`application/json` is accepted too.",
        examples=[{"city": "Porto", "diet": {"vegetarian": True}, "old_key": None}],
    ),
]


@router.get(
    "/users/{user_id}/profile",
    summary="A user's profile: attributes and the facts learned",
    description="An unknown user has an empty profile.",
    response_model=Profile,
    responses=problem_responses(),
)
async def get_profile(user_id: UserIdPath, tenant: TenantDep, profile: ProfileDep) -> Profile:
    return await profile.get(tenant, user_id)


@router.patch(
    "/users/{user_id}/profile",
    summary="Change a user's attributes with a JSON merge-patch",
    response_model=Profile,
    responses=problem_responses(BadRequest, ProfileTooLarge, UserErasureInProgress),
)
async def patch_profile(
    user_id: UserIdPath, patch: MergePatch, tenant: TenantDep, profile: ProfileDep
) -> Profile:
    body: dict[str, Any] = patch
    return await profile.patch(tenant, user_id, body)
