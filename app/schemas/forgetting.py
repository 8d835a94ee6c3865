"""Reinforcement feedback, restores, forgetting policies and maintenance requests."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.schemas.common import Identifier, StrictModel, Uuid

IdList = list[Uuid]


class FeedbackRequest(StrictModel):
    user_id: Identifier
    used: IdList = Field(
        default_factory=list,
        max_length=200,
        description="memories the agent used: each counts as one recall (reinforced)",
    )
    useless: IdList = Field(
        default_factory=list,
        max_length=200,
        description="memories that did not help: each takes one step of strength back",
    )


class FeedbackAccepted(BaseModel):
    accepted: int = Field(description="ids counted; written by the next flush (about 1 s)")
    ignored: IdList = Field(
        description="ids that are not this user's live memories (unknown, deleted, forgotten)"
    )


class ForgettingPolicyOut(BaseModel):
    """A tenant's forgetting policy (docs/forgetting.md); unset fields are the defaults."""

    enabled: bool = Field(description="whether the periodic sweep forgets for this tenant")
    base_days: float = Field(description="stability S, in days, of a memory never reinforced")
    growth: float = Field(description="S multiplies by this with each reinforcement")
    retention_threshold: float = Field(description="forgotten when retention is below this …")
    importance_threshold: float = Field(description="… and importance is below this")
    pin_after: int = Field(description="reinforcements after which a memory is pinned")
    grace_days: float = Field(description="days a forgotten memory can be restored")


class ForgettingPolicyPatch(StrictModel):
    enabled: bool | None = None
    base_days: float | None = Field(default=None, gt=0, le=3650)
    growth: float | None = Field(default=None, ge=1, le=100)
    retention_threshold: float | None = Field(default=None, ge=0, le=1)
    importance_threshold: float | None = Field(default=None, ge=0, le=1)
    pin_after: int | None = Field(default=None, ge=1, le=1_000_000)
    grace_days: float | None = Field(default=None, ge=0, le=3650)


MaintenanceTask = Literal["promote", "summarize", "forget", "reindex", "graph"]


class MaintenanceRequest(StrictModel):
    task: MaintenanceTask
    user_id: Identifier | None = Field(
        default=None, description="forget, reindex and graph: only this user's memories"
    )
    dry_run: bool = Field(
        default=False, description="report what the task would do; change nothing"
    )
