"""The current `make bench` figures: renders the newest result of each suite it runs
(latency.py's service levels, locomo.py's retrieval) into bench/README.md's marked block, with
the machine, the commit and the date, and leaves the hand-written sections alone.

Usage: python bench/report.py [--results bench/results] [--readme bench/README.md] [--print]
bench/run.sh runs it after the latency or the locomo suite.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import latency
import locomo
from benchlib import JSON, REPO_ROOT, fmt

BEGIN = "<!-- make bench: begin -->"
END = "<!-- make bench: end -->"
# bench/run.sh names each result `<suite>-<UTC stamp>.json`; the stamp sorts by time.
STAMPED = re.compile(r"(?P<suite>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<stamp>\d{8}T\d{6}Z)\.json")
# Where the run was, not what it measured: left out of the arguments a block names.
RUN_SPECIFIC = {"url", "out", "pid", "data", "api_key", "run_id"}


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    env: str  # bench/run.sh's variable for the script's extra arguments
    parser: Callable[[], argparse.ArgumentParser]
    render: Callable[[JSON], list[str]]


def newest(results: Path, suite: str) -> Path | None:
    """The latest `<suite>-<stamp>.json` in results, or None."""
    stamped = [
        p
        for p in results.glob(f"{suite}-*.json")
        if (m := STAMPED.fullmatch(p.name)) and m["suite"] == suite
    ]
    return max(stamped, key=lambda p: p.name, default=None)


def provenance(result: JSON, suite: Suite) -> str:
    """When, at which commit, on which machine, and with which arguments a result was taken."""
    m = result["machine"]
    when = datetime.fromtimestamp(m["started_at_unix"], UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = str(m["git_commit"])
    sha = commit.removesuffix("-dirty")[:12]
    dirty = " with uncommitted changes" if commit.endswith("-dirty") else ""
    load = m.get("load_average_at_start")
    load_text = f", load {load[0]:.2f} at the start" if load else ""
    ram = f", {m['ram_mib'] / 1024:.0f} GiB RAM" if m.get("ram_mib") else ""
    parser = suite.parser()
    changed = [
        f"--{name.replace('_', '-')} {_arg(value)}".rstrip()
        for name, value in result["args"].items()
        if name not in RUN_SPECIFIC and value != parser.get_default(name)
    ]
    args = (
        f'run with `{suite.env}="{" ".join(changed)}"`, not `make bench`\'s defaults'
        if changed
        else "run with `make bench`'s defaults"
    )
    return (
        f"{when}, commit `{sha}`{dirty}; {m['cpu_model']}, {m['nproc']} cores{ram}, "
        f"Python {m['python']}{load_text}; {args}."
    )


def _arg(value: object) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is True else str(value)


def _errors(result: JSON) -> str:
    counts: dict[str, int] = result.get("errors", {}).get("counts", {})
    if not counts:
        return "Errors: none."
    listed = ", ".join(f"{n} × {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"Errors: {sum(counts.values())} ({listed})."


def render_latency(result: JSON) -> list[str]:
    meets = {True: "yes", False: "**no**", None: "n/a"}
    lines = ["| path | target | measured | meets |", "|---|---|---|---|"]
    lines += [
        f"| {r['path']} | {r['target']} | {r['measured']} | {meets[r['ok']]} |"
        for r in result["table"]
    ]
    return [*lines, "", _errors(result)]


def render_locomo(result: JSON) -> list[str]:
    data, recall = result["dataset"], result["recall"]
    overall: JSON = recall["overall"]
    columns = [k for k in overall if k != "n"]
    lines = [
        f"{data['conversations']} conversations, {data['sessions']} sessions, {data['turns']} "
        f"turns, {data['questions']} questions; turn-level evidence recall at top_k "
        f"{recall['top_k']} (R@k), and within N o200k tokens of returned content (BN).",
        "",
        "| | n | " + " | ".join(columns) + " |",
        "|---|---:|" + "---:|" * len(columns),
    ]

    def row(label: str, m: JSON) -> str:
        cells = ["–" if m.get(c) is None else f"{m[c]:.3f}" for c in columns]
        return f"| {label} | {m.get('n', '')} | " + " | ".join(cells) + " |"

    lines.append(row("all", overall))
    lines += [row(label, m) for label, m in recall["per_category"].items()]
    if dragon := recall.get("reference_dragon"):
        lines.append(row("DRAGON (LoCoMo paper)", dragon))
    client = recall["client_ms"]
    facts = [
        f"Recall at concurrency {recall['concurrency']}: p50 {fmt(client['p50'])} ms, "
        f"p99 {fmt(client['p99'])} ms"
    ]
    ingest = result["ingest"]
    if not ingest.get("skipped"):
        facts.append(
            f"ingest {fmt(ingest['ingest_messages_per_s'], 0)} messages/s, promotion "
            f"{fmt(ingest['promotion_messages_per_s'], 0)} messages/s"
        )
    context = result.get("context", {})
    if context.get("calls"):
        lat = context["latency_ms"]
        facts.append(
            f"context (token_budget {context['token_budget']}): p50 {fmt(lat['p50'])} ms, "
            f"p99 {fmt(lat['p99'])} ms"
        )
    return [*lines, "", "; ".join(facts) + ". " + _errors(result)]


SUITES = (
    Suite(
        "latency",
        "Service levels (`latency.py`)",
        "LATENCY_ARGS",
        latency.build_parser,
        render_latency,
    ),
    Suite(
        "locomo",
        "LoCoMo retrieval (`locomo.py`)",
        "LOCOMO_ARGS",
        locomo.build_parser,
        render_locomo,
    ),
)


def render(results: Path) -> str:
    """The block between the markers, markers included."""
    lines = [
        BEGIN,
        "## Latest `make bench`",
        "",
        "Written by `make bench` (`bench/report.py`) from the newest result of each suite in "
        "`bench/results/`; a run overwrites this section.",
    ]
    for suite in SUITES:
        lines += ["", f"### {suite.title}", ""]
        path = newest(results, suite.name)
        if path is None:
            lines.append(f"No `{suite.name}-*.json` in `bench/results/` yet.")
            continue
        result: JSON = json.loads(path.read_text())
        lines += [provenance(result, suite), "", *suite.render(result)]
    return "\n".join([*lines, END])


def replace_block(readme: str, block: str) -> str:
    """readme with its marked block replaced by block; everything outside the markers kept."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start or readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"expected one {BEGIN} ... {END} block, in that order")
    return readme[:start] + block + readme[end + len(END) :]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--results", type=Path, default=REPO_ROOT / "bench" / "results")
    p.add_argument("--readme", type=Path, default=REPO_ROOT / "bench" / "README.md")
    p.add_argument("--print", action="store_true", help="print the block; leave the README alone")
    args = p.parse_args(argv)
    block = render(args.results)
    if args.print:
        print(block)
        return 0
    try:
        updated = replace_block(args.readme.read_text(), block)
    except ValueError as exc:
        print(f"{args.readme}: {exc}", file=sys.stderr)
        return 1
    args.readme.write_text(updated)
    print(f"rewrote the `make bench` block of {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
