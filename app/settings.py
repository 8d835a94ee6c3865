"""The one settings object: every knob of the service, read from `STRATA_*` variables.

Which stores run is derived from which URLs are set: with none set, Strata runs embedded
(SQLite, Qdrant Edge, an in-process Redis stand-in and an in-process worker) under `data_dir`.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.entities import DEFAULT_KINDS, KINDS
from app.core.relevance import CONFIDENT_RELEVANCE, RELEVANCE_FEATURES


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    # Stores. None means the embedded stand-in for that store.
    data_dir: Path = Field(
        default=Path("./data"),
        description="the embedded mode's files: the SQLite database and the Qdrant Edge shard",
    )
    database_url: SecretStr | None = Field(
        default=None, description="postgresql+asyncpg://user:pass@host/db; unset: SQLite file"
    )
    redis_url: SecretStr | None = Field(default=None, description="redis://host:6379/0")
    qdrant_url: str | None = Field(
        default=None,
        description="http://host:6333 for a server, ':memory:' or 'path:<dir>' for "
        "qdrant-client local mode (tests only); unset: Qdrant Edge on disk",
    )
    db_lock_timeout_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="PostgreSQL: longest wait for a row lock (lock_timeout) before the "
        "statement fails and the request answers 503 database_unavailable, which a client "
        "may retry; 0: no limit. Bounds a request stuck behind a transaction that hangs",
    )
    qdrant_api_key: SecretStr | None = Field(
        default=None, description="the Qdrant server's API key"
    )
    collection_prefix: str = Field(
        default="strata",
        description="the start of the Qdrant collections' names (two deployments can share "
        "one server)",
    )
    auto_migrate: bool = Field(default=True, description="run Alembic migrations at start")

    # Access (docs/security.md): API keys with scopes, bound to a tenant and maybe a user.
    auth_mode: Literal["keys", "open"] | None = Field(
        default=None,
        description="keys: every /v1 request needs a key; open: no checks, every caller is "
        "the default tenant with every scope. Unset: keys, except an embedded server with no "
        "key configured or created, which runs open and answers loopback callers only",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="the legacy single key: tenant `default_tenant`, every scope",
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="the operator's key: scope admin only, manages the keys of every tenant "
        "(/v1/admin/keys)",
    )
    default_tenant: str = Field(
        default="default",
        description="the tenant of an open server's callers, of the legacy key and of the "
        "admin key",
    )
    key_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="how long a process keeps a key it looked up (a revocation reaches other "
        "processes within this time; the revoking process forgets the key at once)",
    )
    rate_limit_per_second: float = Field(
        default=0.0,
        ge=0,
        description="requests per second each key may sustain (token bucket); 0: no limit, "
        "except for keys created with a limit of their own",
    )
    rate_limit_burst: int = Field(
        default=0,
        ge=0,
        description="the bucket's size, requests a key may send at once; 0: twice the rate",
    )

    # Limits (docs/reliability.md, "Limits").
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=1024,
        description="the largest request body, counted as it streams in; more is a 413",
    )
    ingest_max_chars: int = Field(
        default=200_000,
        ge=1,
        description="the most characters of message content one ingest request may carry; "
        "more is a 413",
    )

    # Metrics (docs/scaling.md, "Metrics").
    metrics_token: SecretStr | None = Field(
        default=None,
        description="when set, GET /metrics requires `Authorization: Bearer <token>`; "
        "unset: /metrics is open (keep it on a private network)",
    )
    metrics_multiproc_dir: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("PROMETHEUS_MULTIPROC_DIR"),
        description="PROMETHEUS_MULTIPROC_DIR, the client library's own variable: an empty "
        "directory shared by every api process and the worker, so that a scrape of one "
        "process reports them all. It must be in the environment (prometheus_client reads "
        "it at import) and emptied before the processes start",
    )
    worker_metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="the worker serves its metrics on this port"
    )

    # Logs: JSON lines carrying the request id (api) and the job id (worker).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="the lowest level logged, the access log's included"
    )
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one object per line; text: for a terminal"
    )

    # Worker.
    worker_in_process: bool | None = Field(
        default=None,
        description="run the promotion worker inside the api; default: with SQLite, or "
        "when the index is embedded (no STRATA_QDRANT_URL), which only the api can open",
    )
    worker_thread: bool = Field(
        default=False,
        description="run the in-process worker on a thread and event loop of its own, so "
        "that promotion's coroutines do not queue between a request's statements (off: "
        "on two shared cores it did not lower one-message ingest's p99, which the SQLite "
        "writer and the GIL hold up) "
        '(docs/reliability.md, "The worker\'s own thread"); only with the embedded index '
        "and no Redis server, whose clients (STRATA_QDRANT_URL, STRATA_REDIS_URL) belong "
        "to the api's loop",
    )
    worker_batch_messages: int = Field(
        default=256,
        ge=1,
        le=5000,
        description="most messages promotion takes from one session in one turn (a slice)",
    )
    worker_slice_chars: int = Field(
        default=32_768,
        ge=1_000,
        le=10_000_000,
        description="most characters promotion takes from one session in one turn (at least "
        "one message): a large import is worked off in bounded slices, in turns with every "
        "other session and user, so it neither delays them nor grows memory",
    )
    worker_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="how long a worker holds a session it promotes before another may take "
        "it over (a killed worker's sessions wait this long)",
    )
    worker_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="how often an idle worker looks for work when no wake-up arrives",
    )
    worker_debounce_seconds: float = Field(
        default=0.2,
        ge=0,
        le=5,
        description="pause after a pass that took all there was, to gather a trickle of "
        "messages into fewer passes (one message a pass held the SQLite writer and the "
        "event loop: single-message ingest p50 14-15 ms, 3.7-5.0 ms with 0.2); a request "
        "that waits for the index (`wait=true`) ends the pause at once, and a backlog (an "
        "import) never pauses; 0: no pause",
    )
    worker_heartbeat_file: Path | None = Field(
        default=None, description="touched after every worker pass (container healthcheck)"
    )
    worker_heartbeat_seconds: float = Field(
        default=2.0,
        gt=0,
        description="how often a worker writes its heartbeat row (read by /readyz)",
    )
    worker_stop_grace_seconds: float = Field(
        default=8.0,
        gt=0,
        le=600,
        description="on shutdown, how long the worker may finish its pass and jobs before "
        "they are cancelled; a cancelled pass gives its leases back and its messages are "
        "promoted after the restart (8 s, and at most 2 s more for the cancellation: "
        "within the 10 s a container runtime waits before it kills)",
    )
    worker_stale_seconds: float = Field(
        default=30.0,
        gt=0,
        description="a worker whose heartbeat is older than this counts as gone: /readyz is "
        "not ready while messages wait to be indexed and no worker is alive",
    )
    wait_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="the longest `wait=true` before it answers 202 with the watermark reached",
    )
    wait_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="a waiting request is woken when its messages are indexed; it also "
        "re-reads the watermark this often, in case a wake-up was lost (Redis down)",
    )

    # Redis: a frozen or unreachable Redis must cost milliseconds, not seconds. The log is
    # the truth, so after a failure Redis is skipped for a while and callers degrade.
    redis_timeout_seconds: float = Field(
        default=0.25, gt=0, le=30, description="connect and socket time-out of Redis calls"
    )
    redis_retry_seconds: float = Field(
        default=5.0,
        ge=0,
        le=600,
        description="after a Redis failure, calls skip Redis for this long (they degrade to "
        "the log at once) before trying it again",
    )

    # Buffer (L2).
    buffer_window: int = Field(
        default=100, ge=1, le=10_000, description="the newest messages a session's window keeps"
    )
    buffer_ttl_seconds: int = Field(
        default=6 * 3600,
        ge=60,
        description="a session's window and scratchpad expire after this long without activity",
    )
    scratchpad_max_bytes: int = Field(
        default=16_384,
        ge=256,
        le=1_048_576,
        description="the largest scratchpad, as serialised JSON; a larger one is a 413",
    )

    # Embeddings.
    embedder: Literal["use-m3", "openai"] = Field(
        default="use-m3",
        description="use-m3: the bundled multilingual encoder, in the process; openai: an "
        "OpenAI-compatible embeddings endpoint (`embedding_url`)",
    )
    embedding_url: str | None = Field(
        default=None, description="with `openai`: the endpoint's base URL"
    )
    embedding_model: str = Field(
        default="text-embedding-3-small", description="with `openai`: the model name sent"
    )
    embedding_dim: int = Field(default=1536, description="with `openai`: the model's vector size")
    embedding_query_model: str | None = Field(
        default=None,
        description="the model name sent with search queries (default: embedding_model), "
        "for servers that tell an asymmetric model's queries apart by name",
    )
    embedding_query_prefix: str = Field(
        default="", max_length=200, description="put before each search query's text"
    )
    embedding_document_prefix: str = Field(
        default="",
        max_length=200,
        description="put before each stored text (a change builds a new collection)",
    )
    embedding_api_key: SecretStr | None = Field(
        default=None, description="with `openai`: the bearer token sent"
    )
    embedding_timeout_seconds: float = Field(
        default=30.0, description="with `openai`: the time-out of one call"
    )
    malloc_arena_max: int = Field(
        default=2,
        ge=0,
        le=64,
        description="glibc malloc arenas at most (0: glibc's default, 8 per core); fewer "
        "arenas keep less memory that threads once used (docs/reliability.md, Memory)",
    )
    malloc_mmap_threshold_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=0,
        le=2**30,
        description="blocks of this size or more are mapped apart and given back when "
        "freed (0: glibc's default, which grows to 32 MB and keeps big buffers); at 256 kB "
        "the encoder's every call faulted in fresh pages and took 40% longer",
    )
    gc_freeze: bool = Field(
        default=True,
        description="once started, put start-up's objects out of the cyclic garbage "
        "collector's reach (gc.freeze): a full collection no longer stalls every request "
        "for ~90 ms (docs/reliability.md, Memory)",
    )
    gil_switch_interval_ms: float = Field(
        default=1.0,
        ge=0.1,
        le=100.0,
        description="how long a thread may hold Python's GIL before another that waits "
        "for it is let in, in the api process (Python's default is 5): a request's return to "
        "the event loop while promotion's threads run waited up to that long; at 1 ms "
        "one-message ingest's p99 while promoting fell from ~26 to ~19 ms "
        '(docs/reliability.md, "The usual ingest in one hop")',
    )
    trim_after_messages: int = Field(
        default=1_000,
        ge=0,
        description="the worker gives free heap back to the system when it falls idle after "
        "promoting at least this many messages (0: never)",
    )
    embed_bulk_threads: int = Field(
        default=2, ge=1, le=16, description="threads for promotion's batch embedding"
    )
    embed_query_batch_max: int = Field(
        default=32, ge=1, le=256, description="queries of concurrent requests embedded in one call"
    )
    embed_query_batch_wait_ms: float = Field(
        default=0.0,
        ge=0,
        le=50,
        description="how long a query waits for companions before its model call starts; "
        "0: only for requests already runnable (queries that arrive while a call runs go "
        "together in the next one anyway)",
    )
    encoder_table: Literal["file", "memory"] = Field(
        default="file",
        description="the bundled encoder's 63.5 MiB piece table: read row by row from a file "
        "in `model_cache_dir` (the process holds none of it; the page cache keeps the rows in "
        "use, shared by every process on the machine) or held in memory as the encoder loads "
        "it; `file` falls back to memory where the directory is not writable",
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="where the encoder's table file is written once (checked against the "
        "wheel at every start); unset: $XDG_CACHE_HOME/strata, else ~/.cache/strata",
    )

    # LLM (optional): any OpenAI-compatible chat completions endpoint. Unset: heuristics only.
    llm_url: str | None = Field(
        default=None, description="base URL, e.g. https://api.openai.com or http://host:8000/v1"
    )
    llm_model: str = Field(default="gpt-4o-mini", description="the chat model name sent")
    llm_api_key: SecretStr | None = Field(default=None, description="the bearer token sent")
    llm_timeout_seconds: float = Field(default=20.0, gt=0, description="per attempt")
    llm_max_attempts: int = Field(
        default=3, ge=1, le=10, description="attempts per call (429, 5xx, time-outs retried)"
    )

    # Fact extraction (with an LLM; docs/facts.md).
    extract_facts: bool = Field(
        default=True, description="with an LLM: one extraction job per promotion batch"
    )
    fact_candidates: int = Field(
        default=8, ge=1, le=50, description="existing facts shown to the model per batch"
    )
    fact_similarity: float = Field(
        # Low on purpose: "I moved to Porto last week." is 0.30 from "The user lives in
        # Lisbon." (multilingual USE); the model decides, a few extra facts cost tokens only.
        default=0.25,
        ge=0,
        le=1,
        description="dense cosine from which an existing fact is shown to the model",
    )
    # Without an LLM: the pattern extractor (app/core/entities.py; docs/facts.md).
    offline_extraction: bool = Field(
        default=True,
        description="without an LLM: each promoted user turn's entities, relations and profile "
        "facts by patterns, in the promotion's transaction",
    )
    offline_extraction_kinds: list[str] = Field(
        default_factory=lambda: list(DEFAULT_KINDS),
        description="the kinds written (a JSON list); the default, those at precision 0.9 or "
        "more on bench/extraction.py's labelled turns: every kind but `mentions`",
    )

    # Promotion.
    dense_context_turns: int = Field(
        default=1, ge=0, le=4, description="previous turns embedded with each turn"
    )
    dense_context_weight: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="the previous turns' share of each turn's indexed embedding",
    )
    sparse_context_turns: int = Field(
        default=2, ge=0, le=4, description="previous turns in each turn's term vector"
    )
    sparse_context_weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="the previous turns' terms' weight in each turn's term vector",
    )
    # The turn after each turn, relative to the turn's own share (bench/HISTORY.md, "The turn
    # after"): 0 leaves it out. Its terms gain on LoCoMo and cost nothing on the bilingual
    # set; its embedding gained a little more on LoCoMo but lost a cross-language question.
    dense_next_weight: float = Field(
        default=0.0, ge=0, le=1, description="the next turn's embedding, per the turn's own"
    )
    sparse_next_weight: float = Field(
        default=0.25, ge=0, le=1, description="the next turn's terms, per the turn's own"
    )
    dedupe_threshold: float = Field(
        default=0.97,
        gt=0,
        le=1,
        description="a new turn with the same text as a memory and at least this cosine "
        "merges into it instead of becoming a memory of its own",
    )
    promote_retry_base_seconds: float = Field(
        default=1.0,
        gt=0,
        description="a session whose promotion failed waits this long before its retry, "
        "doubling with each failure in a row",
    )
    promote_retry_max_seconds: float = Field(
        default=300.0, gt=0, description="the longest wait of a failing session"
    )

    # Jobs: durable background work and periodic schedules (docs/jobs.md).
    job_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="a running job's lease, renewed every third of it; once it expires "
        "(its runner died) another runner takes the job over. Also the schedules' leader "
        "lease, which the scheduler renews (and checks for due periods) as often",
    )
    job_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="how often an idle runner looks for due jobs",
    )
    job_concurrency: int = Field(default=2, ge=1, le=64, description="jobs a worker runs at once")
    job_max_attempts: int = Field(
        default=5,
        ge=1,
        le=100,
        description="attempts a job gets (a runner that died counts) before it is failed",
    )
    job_retry_base_seconds: float = Field(
        default=1.0, gt=0, description="a failed attempt's wait, doubling with each one"
    )
    job_retry_max_seconds: float = Field(
        default=300.0, gt=0, description="the longest wait between attempts"
    )
    job_keep_succeeded_days: float = Field(
        default=7.0, gt=0, description="succeeded jobs older than this are purged daily"
    )
    erasure_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="how long `DELETE /v1/users/{id}` waits for its erasure job before it "
        "answers 202 with the job instead of 200 with the receipt",
    )
    erasure_purge_database: bool = Field(
        default=True,
        description="after an erasure, purge the database's files of the deleted rows "
        "(docs/privacy.md, 'What stays on disk'). PostgreSQL: VACUUM FULL of the tables that "
        "held them, which locks each table against every request while it is rewritten "
        "(12.5 s for `messages` at a million rows, measured), then a WAL switch and "
        "CHECKPOINT; SQLite: VACUUM. "
        "Off: receipts say `purged_from_disk.database` false",
    )
    erasure_purge_lock_timeout_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="PostgreSQL: how long the purge's VACUUM FULL waits for a table's lock "
        "before it lets go and tries again (requests touching the table queue behind it "
        "while it waits)",
    )
    erasure_purge_wait_seconds: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="how long an erasure's purge waits, per attempt of its job, for what "
        "holds it up: a PostgreSQL transaction older than the deletes (a backup's snapshot), "
        "a table's lock, a Redis rewrite. Then the attempt fails and the job retries; the "
        "last attempt succeeds with `purged_from_disk` false and the reason instead",
    )

    # Recall scoring (docs/architecture.md §3); defaults from the LoCoMo benchmark.
    weight_semantic: float = Field(
        default=0.9,
        ge=0,
        description="a recall's score weight of relevance, when the request gives none "
        "(the three weights are normalised to sum to 1)",
    )
    weight_recency: float = Field(
        default=0.05,
        ge=0,
        description="... of recency, exp(-lambda * days since the memory was last used, "
        "else created)",
    )
    weight_importance: float = Field(default=0.05, ge=0, description="... of importance")
    recency_lambda_per_day: float = Field(
        default=0.01, ge=0, description="recency's decay rate per day"
    )
    importance_intrinsic_share: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="importance: the share of the text's own importance; the rest is how "
        "often the memory was used",
    )
    rrf_k: int = Field(default=10, ge=1, description="the rank fusion's k")
    reinforce_min_relevance: float = Field(
        default=CONFIDENT_RELEVANCE,
        ge=0,
        le=1,
        description="a recall result reinforces its memory only when its calibrated relevance "
        "is at least this (and its own text matched); docs/forgetting.md",
    )

    # Forgetting (docs/forgetting.md): each tenant's policy starts from these defaults.
    forgetting_enabled: bool = Field(
        default=True, description="whether the periodic sweep forgets (tenants may override)"
    )
    forgetting_sweep_hours: float = Field(
        default=24.0, gt=0, description="how often the forgetting sweep runs"
    )
    dense_weight: float = Field(
        default=0.5, gt=0, description="RRF weight of the dense list, same-language candidates"
    )
    dense_weight_cross_language: float = Field(
        default=4.0,
        gt=0,
        description="RRF weight of the dense list for a candidate in another language than "
        "the query (zh vs en): only the encoder can match it",
    )
    sparse_weight: float = Field(default=1.0, gt=0, description="RRF weight of the sparse list")
    cross_language_relevance: bool = Field(
        default=True,
        description="put the relevance of a memory in another language than the query (zh vs "
        "en) on the same-language scale (app.core.relevance.CrossLanguage); off only to refit it",
    )
    relevance_weights: dict[str, float] | None = Field(
        default=None,
        description="the relevance calibration's coefficients for another encoder than the "
        "bundled one (JSON: cos_turn, cos_chunk, cov_own, cov_chunk, bias), as "
        "bench/experiments/recall_grid.py --embedding-url fits them; its cosines are on a "
        "scale of their own. The cross-language map, fitted on the bundled encoder, is then "
        "off",
    )
    relevance_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="share of the calibrated relevance in the semantic ranking key; the rest "
        "is the normalised rank fusion",
    )
    answer_type_penalty: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="for a when/where question, the share taken off the rank-fusion key of "
        "a memory whose own text names no time/place (app.core.ranking.names)",
    )
    named_period_penalty: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="for a query that names a date, month or year (and no `time_range`), the "
        "share taken off the rank-fusion key of a memory from outside that period "
        "(app.core.ranking.named_period)",
    )
    change_similarity: float = Field(
        default=0.4,
        ge=-1,
        le=1,
        description="turn-vector cosine above which a newer statement of a change goes above "
        "an older result",
    )
    index_build_min_points: int = Field(
        default=10_000,
        ge=0,
        description="embedded index: build the HNSW graph (in the background, on a copy) once "
        "this many points were written since the last build; 0: always brute force",
    )
    index_build_fraction: float = Field(
        default=0.2,
        ge=0,
        le=10,
        description="... and at least this share of the index's points",
    )
    index_vector_cache_mb: int = Field(
        default=32,
        ge=0,
        description="embedded index: memory for the payloads and index terms of recently "
        "recalled points (~3 kB each), so a recall reads them from the index only the first "
        "time; 0: read every candidate's on every recall (the name is older: no vector is "
        "kept, the index computes the query's cosines itself)",
    )
    candidate_pool: int = Field(
        default=30, ge=1, le=1000, description="candidates per search list before scoring"
    )

    # Summaries (docs/architecture.md, "Summaries").
    summary_daily_tokens: int = Field(default=200, ge=20, le=4000, description="a daily's cap")
    summary_weekly_tokens: int = Field(default=300, ge=20, le=4000, description="a weekly's cap")
    summary_essence_tokens: int = Field(
        default=400, ge=20, le=8000, description="the essence's cap"
    )
    summary_essence_weeks: int = Field(
        default=12, ge=1, le=520, description="newest weeklies an LLM essence is written from"
    )
    summary_lookback_hours: float = Field(
        default=48.0,
        ge=25,
        description="the hourly sweep looks at messages received this far back: days that "
        "closed, and late messages for closed days (a sweep missed for longer than this is "
        "not back-filled; POST /v1/summarize is)",
    )
    summary_context_dailies: int = Field(
        default=7, ge=0, le=60, description="dailies context offers before the recent turns"
    )
    summary_context_weeklies: int = Field(
        default=4, ge=0, le=52, description="weeklies context offers before those dailies"
    )

    # Context.
    tokenizer: Literal["o200k_base", "cl100k_base"] = Field(
        default="o200k_base", description="what token budgets and counts are measured in"
    )
    context_shares: dict[str, float] = Field(
        default_factory=lambda: {"recent_messages": 0.5, "profile": 0.25},
        description="per context section, the share of the budget (after the system prompt "
        "and the last user message) it may take in its turn, before the lower-priority "
        "sections; what they leave flows back. JSON, e.g. "
        '{"recent_messages": 0.5, "memories": 0.3}',
    )

    context_recent_turns: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="the newest turns of the session packed before the recalled memories "
        "(within the recent_messages share); older turns come after the memories, and a "
        "recalled turn is shown once",
    )

    context_cache_seconds: float = Field(
        default=60,
        ge=0,
        le=3600,
        description="how long context keeps a user's profile and summaries between calls "
        "(0: read them on every call); a write that may change them ends the entry at once "
        "(docs/architecture.md §4); this bounds only what a lost announcement can leave",
    )
    context_cache_mb: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="what context's cache of profiles and summaries may hold per process, "
        "roughly (their text and objects); the least recently used go first",
    )

    @field_validator("context_shares")
    @classmethod
    def _shares_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for name, share in value.items():
            if not 0 <= share <= 1:
                raise ValueError(f"the share of {name!r} must lie in [0, 1], not {share}")
        return value

    @field_validator("offline_extraction_kinds")
    @classmethod
    def _known_kinds(cls, value: list[str]) -> list[str]:
        unknown = [k for k in value if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown kinds {', '.join(unknown)}; known: {', '.join(KINDS)}")
        return value

    @field_validator("relevance_weights")
    @classmethod
    def _all_relevance_weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return value
        if set(value) != set(RELEVANCE_FEATURES):
            raise ValueError(
                f"needs exactly the keys {', '.join(RELEVANCE_FEATURES)}, not {', '.join(value)}"
            )
        if not all(math.isfinite(v) for v in value.values()):
            raise ValueError("every coefficient must be a finite number")
        return value

    @cached_property
    def sqlite_path(self) -> Path:
        return self.data_dir / "strata.db"

    @property
    def database_dsn(self) -> str:
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite+aiosqlite:///{self.sqlite_path}"

    @property
    def is_sqlite(self) -> bool:
        return self.database_dsn.startswith("sqlite")

    @property
    def run_worker_in_process(self) -> bool:
        """Unset, the worker runs in the api with SQLite (the embedded default) and whenever
        the index is embedded: a Qdrant Edge shard only the api's process can open, so a
        PostgreSQL URL alone does not move the worker out."""
        if self.worker_in_process is not None:
            return self.worker_in_process
        return self.is_sqlite or self.qdrant_url is None

    @property
    def worker_on_thread(self) -> bool:
        """The in-process worker runs on a thread of its own (app/worker.py): embedded
        (Qdrant Edge, no Redis server), where every store it shares with the api's loop is
        safe across loops."""
        return (
            self.run_worker_in_process
            and self.worker_thread
            and self.redis_url is None
            and self.qdrant_url is None
        )

    def refusal(self, role: Literal["api", "worker"]) -> str | None:
        """Why this configuration cannot work for `role`, or None. Qdrant Edge is a shard
        on disk that one process opens: the api's. A worker in another process cannot open
        it, so such a worker would exit and nothing would ever be indexed."""
        if self.qdrant_url is not None:
            return None
        if role == "worker":
            return (
                "the worker cannot run as its own process on the embedded index (Qdrant "
                "Edge, opened by the api): set STRATA_QDRANT_URL to a Qdrant server for "
                "api and worker, or run the worker inside the api "
                "(STRATA_WORKER_IN_PROCESS=true, the embedded default)"
            )
        if not self.run_worker_in_process:
            return (
                "STRATA_WORKER_IN_PROCESS=false with the embedded index (Qdrant Edge): no "
                "other process can open its shard, so nothing would ever be indexed. Unset "
                "STRATA_WORKER_IN_PROCESS (the worker then runs inside the api), or set "
                "STRATA_QDRANT_URL to a Qdrant server and run `python -m app.worker`"
            )
        return None


class RefusedConfiguration(SystemExit):
    """Raised at start for a configuration that cannot work: the process exits with the
    reason on stderr (status 1), before opening anything."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"strata: refusing to start: {reason}")
        self.reason = reason


def refuse_unworkable(settings: Settings, role: Literal["api", "worker"]) -> None:
    reason = settings.refusal(role)
    if reason is not None:
        raise RefusedConfiguration(reason)
