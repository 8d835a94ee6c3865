"""The LLM provider: any OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, DeepSeek,
Qwen, vLLM, Ollama), for every LLM use (query rewriting, summaries, fact extraction).

One shared `httpx` client, a timeout per call, bounded retries with exponential backoff and
jitter that honour `Retry-After` on 429 and 5xx (tenacity), JSON output validated against a
pydantic schema, and the token usage of every call counted and returned. Callers treat every
`LLMError` as "no LLM this time" and fall back to their heuristic: an LLM never loses or
blocks the input it was asked about.
"""

from __future__ import annotations

import email.utils
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import httpx
import orjson
from pydantic import BaseModel, ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

log = logging.getLogger("strata.llm")

T = TypeVar("T", bound=BaseModel)


class LLMError(Exception):
    """The LLM gave no usable answer this time; the caller falls back."""


class LLMUnavailable(LLMError):
    """Timed out, refused, or kept failing after the retries."""


class LLMInvalidOutput(LLMError):
    """The answer was not JSON of the asked-for schema."""


class _Retryable(LLMError):
    """A 429 or 5xx (with the server's `Retry-After`, if it sent one) or a transport error."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(slots=True)
class Usage:
    """Token usage as the provider reports it, summed over calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "calls": self.calls,
        }


@dataclass(slots=True)
class LLMResult(Generic[T]):
    value: T
    usage: Usage = field(default_factory=Usage)
    model: str = ""


class LLM(Protocol):
    model: str

    async def complete_json(
        self, messages: list[dict[str, str]], schema: type[T], *, purpose: str
    ) -> LLMResult[T]:
        """The answer to `messages`, parsed as `schema`; raises `LLMError` on failure."""
        ...

    async def close(self) -> None: ...


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds: a number of seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class _WaitRetryAfter:
    """Wait what the server asked for (capped), else exponential backoff with jitter."""

    def __init__(self, fallback: Any, cap: float) -> None:
        self.fallback = fallback
        self.cap = cap

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, self.cap)
        return float(self.fallback(state))


def _json_object(text: str) -> Any:
    """The JSON in a model's answer, tolerating a fenced code block around it."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`")
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
    return orjson.loads(stripped)


class OpenAICompatibleLLM:
    """Chat completions over one shared client, asking for a JSON object."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        model: str,
        max_attempts: int = 3,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        temperature: float = 0.0,
    ) -> None:
        self.client = client
        self.model = model
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.temperature = temperature
        base = str(client.base_url).rstrip("/")
        # Base URLs are written both ways ("https://host" and "https://host/v1").
        self.path = "chat/completions" if base.endswith("/v1") else "v1/chat/completions"

    async def complete_json(
        self, messages: list[dict[str, str]], schema: type[T], *, purpose: str
    ) -> LLMResult[T]:
        usage = Usage()
        started = time.perf_counter()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=_WaitRetryAfter(
                wait_exponential_jitter(multiplier=self.backoff_initial, max=self.backoff_max),
                cap=self.backoff_max,
            ),
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    content = await self._call(messages, usage)
        except _Retryable as exc:
            raise LLMUnavailable(f"{purpose}: {exc}") from exc
        try:
            value = schema.model_validate(_json_object(content))
        except (orjson.JSONDecodeError, ValidationError, ValueError) as exc:
            log.warning("LLM answer for %s was not valid %s", purpose, schema.__name__)
            raise LLMInvalidOutput(
                f"{purpose}: the answer is not valid JSON for the schema"
            ) from exc
        log.info(
            "llm call",
            extra={
                "purpose": purpose,
                "model": self.model,
                "tokens": usage.total_tokens,
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return LLMResult(value=value, usage=usage, model=self.model)

    async def _call(self, messages: list[dict[str, str]], usage: Usage) -> str:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "response_format": {"type": "json_object"},
        }
        try:
            resp = await self.client.post(self.path, json=body)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"transport error ({type(exc).__name__})") from exc
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retryable(
                f"provider answered {resp.status_code}",
                retry_after_seconds(resp.headers.get("retry-after")),
            )
        if resp.status_code >= 400:  # a key, model or request problem: a retry is the same
            raise LLMUnavailable(f"provider answered {resp.status_code}")
        try:
            data = resp.json()
            reported = data.get("usage") or {}
            usage.add(
                Usage(
                    prompt_tokens=int(reported.get("prompt_tokens", 0)),
                    completion_tokens=int(reported.get("completion_tokens", 0)),
                    calls=1,
                )
            )
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMInvalidOutput("the provider's answer is not a chat completion") from exc
        if not isinstance(content, str):
            raise LLMInvalidOutput("the completion has no text content")
        return content

    async def close(self) -> None:
        await self.client.aclose()
