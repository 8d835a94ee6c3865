"""Plot recall p50/p99 (and the server's CPU per answer) against memories per user, before
and after, from `scale.py` reports.

    python bench/plot_scale.py BEFORE.json AFTER.json --out bench/recall_scale.png

One panel per client count; matplotlib is a bench tool only (`pip install matplotlib`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("reports", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "recall_scale.png")
    p.add_argument("--path", default="recall", choices=["recall", "context"])
    args = p.parse_args()
    reports: list[dict[str, Any]] = [json.loads(r.read_text()) for r in args.reports]
    clients = sorted({c for r in reports for c in r["clients"]})
    fig, axes = plt.subplots(2, len(clients), figsize=(4.2 * len(clients), 7), squeeze=False)
    styles = {"p50": "-o", "p99": "--s"}
    for ax, c in zip(axes[1], clients, strict=True):
        # The server's CPU per answer: the figure a busy shared machine colours least.
        for r in reports:
            sizes = sorted(int(s) for s in r["sizes"])
            cells = [r["sizes"][str(s)][args.path].get(str(c)) for s in sizes]
            pts = [
                (s, 1000 * x["server_cpu"] / x["rate"])
                for s, x in zip(sizes, cells, strict=True)
                if x and x.get("rate")
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), "-^", label=f"{r['label']}")
        ax.set_xscale("log")
        ax.set_xlabel("memories for the user")
        ax.set_ylabel("server CPU per answer, ms")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=7)
    for ax, c in zip(axes[0], clients, strict=True):
        for r in reports:
            sizes = sorted(int(s) for s in r["sizes"])
            for q, style in styles.items():
                ys = [r["sizes"][str(s)][args.path].get(str(c), {}).get(q) for s in sizes]
                pts = [(s, y) for s, y in zip(sizes, ys, strict=True) if y is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, label=f"{r['label']} {q}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories for the user")
        ax.set_ylabel(f"{args.path} latency, ms")
        ax.set_title(f"{c} client{'s' if c > 1 else ''}")
        ax.axhline(10, color="grey", lw=0.5)
        ax.axhline(40, color="grey", lw=0.5, ls="--")
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Strata embedded, 2 cores, over HTTP (lean client); targets 10 / 40 ms")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
