"""Write docs/configuration.md from the settings (`make config-doc`):

    python -m app.settings_doc > docs/configuration.md

Every field of `app.settings.Settings` is listed with its environment variable, type, default,
bounds and description, grouped by concern: a field goes to the first group one of whose
prefixes its name starts with, else to "Other". tests/unit/test_configuration_doc.py fails
when the file differs from what this renders.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from app.settings import Settings

ENV_PREFIX = "STRATA_"

# (title, what the group is for, the field-name prefixes it takes), in the order rendered.
# A prefix names a concern, not one field, so that a new field lands in its group by itself.
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Stores",
        "Which stores run: with no URL set, Strata runs embedded (SQLite, Qdrant Edge, an "
        "in-process Redis stand-in and worker) under the data directory.",
        ("data_dir", "database_", "redis_url", "qdrant_", "collection_", "auto_migrate", "db_"),
    ),
    (
        "Access",
        "API keys, scopes and rate limits ([security.md](security.md)).",
        ("auth_", "api_key", "admin_key", "default_tenant", "key_", "rate_limit_"),
    ),
    (
        "Limits",
        "What one request may carry ([reliability.md](reliability.md#limits)).",
        ("max_body_", "ingest_max_", "scratchpad_max_"),
    ),
    (
        "Metrics and logs",
        "[scaling.md](scaling.md) §7.",
        ("metrics_", "worker_metrics_", "log_"),
    ),
    (
        "Worker and promotion",
        "How messages become indexed memories ([architecture.md](architecture.md) §2, "
        "[reliability.md](reliability.md#fairness)).",
        (
            "worker_",
            "wait_",
            "promote_",
            "dedupe_",
            "dense_context_",
            "sparse_context_",
            "dense_next_",
            "sparse_next_",
        ),
    ),
    (
        "Redis and the session buffer",
        "A frozen or unreachable Redis costs milliseconds: after a failure it is skipped for a "
        "while and callers fall back to the log.",
        ("redis_", "buffer_"),
    ),
    (
        "Embeddings",
        "The bundled encoder, or an OpenAI-compatible embeddings endpoint.",
        ("embedder", "embedding_", "embed_", "encoder_", "model_cache_"),
    ),
    (
        "Process memory",
        "Set once at start ([reliability.md](reliability.md#memory)).",
        ("malloc_", "gc_", "trim_"),
    ),
    (
        "LLM",
        "Optional: any OpenAI-compatible chat completions endpoint; unset, heuristics only.",
        ("llm_",),
    ),
    (
        "Facts",
        "With an LLM, and without one by patterns ([facts.md](facts.md)).",
        ("extract_facts", "fact_", "offline_extraction"),
    ),
    ("Jobs", "Durable background work and schedules ([jobs.md](jobs.md)).", ("job_", "erasure_")),
    (
        "Recall ranking",
        "The ranking's constants, each measured before it was set "
        "([architecture.md](architecture.md) §3).",
        (
            "weight_",
            "recency_",
            "importance_",
            "rrf_",
            "reinforce_",
            "dense_weight",
            "sparse_weight",
            "cross_language_",
            "relevance_",
            "answer_type_",
            "named_period_",
            "change_",
            "candidate_",
        ),
    ),
    ("Embedded index", "Qdrant Edge, in the api's process.", ("index_",)),
    (
        "Forgetting",
        "Each tenant's policy starts from these ([forgetting.md](forgetting.md)).",
        ("forgetting_",),
    ),
    ("Summaries", "[architecture.md](architecture.md) §10.", ("summary_",)),
    ("Context", "What a context call packs, and what it caches.", ("tokenizer", "context_")),
)
OTHER = ("Other", "Settings no group above names yet.", ())

HEADER = """# Configuration

<!-- Generated from app/settings.py by `make config-doc` (python -m app.settings_doc); do not
edit by hand: tests/unit/test_configuration_doc.py fails when this file differs. -->

Every setting is an environment variable (or a line of a `.env` file in the working
directory) named `STRATA_` and the setting's name in capitals; the one exception is
`PROMETHEUS_MULTIPROC_DIR`, the Prometheus client's own. A value out of its bounds or not one
of its choices stops the process at start. Settings of a JSON type take a JSON object.
"""


def group_of(name: str) -> str:
    for title, _, prefixes in GROUPS:
        if name.startswith(prefixes):
            return title
    return OTHER[0]


def env_name(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return str(choices[0])
    if isinstance(alias, str):
        return alias
    return ENV_PREFIX + name.upper()


def type_text(annotation: Any) -> str:
    """The type as a reader writes the variable, not as Python spells it."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(f"`{value}`" for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        parts = [a for a in get_args(annotation) if a is not type(None)]
        return " | ".join(type_text(a) for a in parts)
    if origin is dict:
        _, value = get_args(annotation)
        return f"JSON object of {type_text(value)}s"
    names: dict[Any, str] = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        Path: "path",
        SecretStr: "secret",
    }
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return f"`{json.dumps(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def bounds_text(field: FieldInfo) -> str:
    marks = {
        annotated_types.Ge: ("≥", "ge"),
        annotated_types.Gt: (">", "gt"),
        annotated_types.Le: ("≤", "le"),
        annotated_types.Lt: ("<", "lt"),
        annotated_types.MaxLen: ("at most", "max_length"),
    }
    out = []
    for item in field.metadata:
        for kind, (sign, attr) in marks.items():
            if isinstance(item, kind):
                limit = getattr(item, attr)
                out.append(
                    f"{sign} {limit} characters" if attr == "max_length" else f"{sign} {limit}"
                )
    return ", ".join(out)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(settings: type[Settings] = Settings) -> str:
    fields = settings.model_fields
    missing = [name for name, field in fields.items() if not field.description]
    if missing:
        raise ValueError(f"settings without a description: {', '.join(missing)}")
    grouped: dict[str, list[str]] = {}
    for name in fields:
        grouped.setdefault(group_of(name), []).append(name)
    lines = [HEADER]
    contents = [title for title, _, _ in (*GROUPS, OTHER) if title in grouped]
    lines.append(" · ".join(f"[{t}](#{t.lower().replace(' ', '-')})" for t in contents) + "\n")
    for title, intro, _ in (*GROUPS, OTHER):
        if title not in grouped:
            continue
        lines.append(f"## {title}\n")
        lines.append(f"{intro}\n")
        lines.append("| variable | type | default | description |")
        lines.append("|---|---|---|---|")
        for name in grouped[title]:
            field = fields[name]
            bounds = bounds_text(field)
            kind = type_text(field.annotation) + (f" ({bounds})" if bounds else "")
            description = cell(field.description or "")
            lines.append(
                f"| `{env_name(name, field)}` | {cell(kind)} | {cell(default_text(field))} "
                f"| {description} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
