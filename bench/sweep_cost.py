"""The nightly forgetting sweep's cost on a seeded data directory: one dry run, timed.

    cd CHECKOUT && python /path/to/bench/sweep_cost.py --data-dir DIR [--runs 2]

Opens the services of the checkout in the current directory (so a checkout of main measures
the "before") on a copy of a directory seeded by `seed.py`, and runs
`ForgettingService.sweep(dry_run=True)` over every tenant: it reads every live, unpinned
memory as the nightly sweep does, and changes nothing. Prints wall and process CPU seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

from app.resources import open_resources
from app.settings import Settings
from app.wiring import build_container


async def measure(args: argparse.Namespace) -> None:
    for name in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_QDRANT_URL"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="strata-sweep.") as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(args.data_dir, data)
        settings = Settings(
            data_dir=data, log_level="WARNING", worker_in_process=False, index_build_min_points=0
        )
        async with open_resources(settings) as r:
            forgetting = build_container(r).services.forgetting
            for _ in range(args.runs):
                wall, cpu = time.perf_counter(), time.process_time()
                report = await forgetting.sweep(dry_run=True)
                print(
                    f"dry-run sweep: {report.examined} examined, {report.forgotten} would be "
                    f"forgotten, {report.pinned} pinned: {time.perf_counter() - wall:.1f}s wall, "
                    f"{time.process_time() - cpu:.1f}s CPU"
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--runs", type=int, default=2)
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
