"""bench/report.py: the `make bench` block of bench/README.md is rendered from the newest result
of each suite, shaped as latency.py and locomo.py write them, and a rewrite touches only the
block between the markers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import latency  # noqa: E402
import locomo  # noqa: E402
import report  # noqa: E402

JSON = dict[str, Any]

BEFORE = "# Benchmarks\n\nHand-written intro.\n\n"
AFTER = "\n\n## Retrieval\n\nHand-written figures | 0.804\n"


def machine(commit: str, started: float) -> JSON:
    return {
        "cpu_model": "Test CPU",
        "nproc": 2,
        "ram_mib": 8192,
        "python": "3.11.7",
        "platform": "Linux",
        "git_commit": commit,
        "load_average_at_start": [1.5, 1.0, 0.5],
        "started_at_unix": started,
    }


def recorded(args: Any) -> JSON:
    """A parsed command line as the scripts record it: vars(args) without the key, paths as text."""
    return {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "api_key"
    }


def latency_result(p50: str, commit: str = "a" * 40, started: float = 1796522345.0) -> JSON:
    args = latency.parse_args(["--url", "http://127.0.0.1:1", "--memories", "500"])
    return {
        "benchmark": "latency",
        "machine": machine(commit, started),
        "run_id": "1",
        "args": recorded(args),
        "errors": {"counts": {"recall 503": 3}, "samples": []},
        "table": [
            {
                "path": "ingest, one message per request: p50",
                "target": "<= 5 ms",
                "measured": p50,
                "ok": False,
            },
            {
                "path": "ingest, batches of 200",
                "target": ">= 5,000 msg/s",
                "measured": "10765 msg/s",
                "ok": True,
            },
            {
                "path": "api process RSS with the local model",
                "target": "<= 600 MB",
                "measured": "n/a",
                "ok": None,
            },
        ],
    }


def metrics(n: int, r10: float) -> JSON:
    keys = [f"R@{k}" for k in locomo.KS] + [f"B{b}" for b in locomo.BUDGETS]
    return {"n": n, **dict.fromkeys(keys, r10)}


def locomo_result(data: Path) -> JSON:
    args = locomo.parse_args(["--data", str(data), "--context-calls", "0"])
    summary = {"n": 302, "mean": 32.5, "p50": 31.5, "p95": 39.0, "p99": 64.7, "max": 92.8}
    return {
        "benchmark": "locomo",
        "machine": machine("b" * 40 + "-dirty", 1796522400.0),
        "args": recorded(args),
        "dataset": {
            "path": str(data),
            "conversations": 10,
            "sessions": 272,
            "turns": 5882,
            "questions": 302,
        },
        "ingest": {
            "accepted": 5882,
            "ingest_messages_per_s": 1385.05,
            "promotion_messages_per_s": 263.9,
        },
        "recall": {
            "top_k": 50,
            "concurrency": 4,
            "client_ms": summary,
            "server_took_ms": summary,
            "overall": metrics(302, 0.8043),
            "per_category": {"1 multi-hop": metrics(43, 0.393)},
            "per_conversation": {},
            "reference_dragon": {f"R@{k}": v for k, v in locomo.DRAGON.items()},
        },
        "context": {"calls": 0},
        "context_evidence": {},
        "errors": {"counts": {}, "samples": []},
        "questions": [],
    }


def write(path: Path, data: JSON) -> None:
    path.write_text(json.dumps(data))


def results_dir(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    write(results / "latency-20261205T100000Z.json", latency_result("99.00 ms", "c" * 40))
    write(results / "latency-20261206T015859Z.json", latency_result("6.77 ms"))
    # Not bench/run.sh's: a script run by hand, and another suite whose name starts alike.
    write(results / "latency.json", latency_result("1.00 ms"))
    write(results / "latency-dev-20261207T000000Z.json", latency_result("2.00 ms"))
    write(results / "locomo-20261206T015859Z.json", locomo_result(tmp_path / "locomo10.json"))
    return results


def test_the_block_carries_each_suites_newest_figures_machine_commit_and_date(
    tmp_path: Path,
) -> None:
    (tmp_path / "locomo10.json").write_text("[]")
    block = report.render(results_dir(tmp_path))
    assert block.startswith(report.BEGIN)
    assert block.endswith(report.END)
    assert "| ingest, one message per request: p50 | <= 5 ms | 6.77 ms | **no** |" in block
    assert "| api process RSS with the local model | <= 600 MB | n/a | n/a |" in block
    for older_or_not_run_sh in ("99.00 ms", "1.00 ms", "2.00 ms"):
        assert older_or_not_run_sh not in block
    assert "2026-12-06 01:59 UTC, commit `aaaaaaaaaaaa`; Test CPU, 2 cores, 8 GiB RAM" in block
    assert "commit `bbbbbbbbbbbb` with uncommitted changes" in block
    # Only the arguments that differ from the script's defaults, as bench/run.sh takes them.
    assert 'run with `LATENCY_ARGS="--memories 500"`' in block
    assert 'run with `LOCOMO_ARGS="--context-calls 0"`' in block
    assert "Errors: 3 (3 × recall 503)." in block
    assert "| all | 302 | 0.804 | 0.804 | 0.804 | 0.804 | 0.804 | 0.804 | 0.804 |" in block
    assert "| 1 multi-hop | 43 | 0.393 |" in block
    assert "| DRAGON (LoCoMo paper) |  | 0.567 | 0.662 | 0.767 | 0.827 | – | – | – |" in block
    assert "p50 31.5 ms, p99 64.7 ms; ingest 1385 messages/s, promotion 264 messages/s" in block


def test_a_rewrite_touches_only_the_block(tmp_path: Path) -> None:
    (tmp_path / "locomo10.json").write_text("[]")
    results = results_dir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEFORE}{report.BEGIN}\nold figures | 0.500\n{report.END}{AFTER}")

    assert report.main(["--results", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text == BEFORE + report.render(results) + AFTER
    assert "old figures" not in text

    assert report.main(["--results", str(results), "--readme", str(readme)]) == 0
    assert readme.read_text() == text


def test_a_suite_without_results_says_so(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    write(results / "latency-20261206T015859Z.json", latency_result("6.77 ms"))
    block = report.render(results)
    assert "6.77 ms" in block
    assert "No `locomo-*.json` in `bench/results/` yet." in block


def test_a_readme_without_one_marked_block_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "locomo10.json").write_text("[]")
    results = results_dir(tmp_path)
    readme = tmp_path / "README.md"
    for text in (
        BEFORE + AFTER,
        f"{BEFORE}{report.END}\n{report.BEGIN}{AFTER}",
        2 * f"{report.BEGIN}{report.END}",
    ):
        readme.write_text(text)
        assert report.main(["--results", str(results), "--readme", str(readme)]) == 1
        assert readme.read_text() == text
