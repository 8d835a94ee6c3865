"""An erased user's bytes on disk, against a running embedded Strata (docs/privacy.md,
"What stays on disk"): a bystander's and then a user's messages, each with a marker of its
own, ingested and indexed; the user erased (DELETE, then the job followed); how long the
erasure took, and how many times the user's marker and id are still found in the files of
the server's data directory (`grep -rao MARKER <data dir> | wc -l`, read here in Python).

Usage: python bench/erasure_disk.py --url http://127.0.0.1:8731 --data-dir <STRATA_DATA_DIR>
       [--messages 20000] [--bystander 0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from benchlib import JSON, Api, machine_facts, print_machine, wait_indexed, wait_ready


def on_disk(root: Path, needle: str) -> dict[str, int]:
    """Per file under `root`, how many times `needle` occurs in its bytes (files that hold
    it only)."""
    raw = needle.encode()
    found = {}
    for path in sorted(root.rglob("*")):
        try:
            n = path.read_bytes().count(raw) if path.is_file() else 0
        except OSError:  # deleted while walked (a graph build's copy)
            continue
        if n:
            found[str(path.relative_to(root))] = n
    return found


async def load(api: Api, user: str, marker: str, messages: int, batch: int = 500) -> list[str]:
    sessions = [f"{user}-s{n}" for n in range((messages + 999) // 1000)]
    i = 0
    for sid in sessions:
        end = min(i + 1000, messages)
        while i < end:
            body = [
                {"id": f"m{k}", "role": "user", "content": f"Note {k}: {marker}x{k:06d} kite"}
                for k in range(i, min(i + batch, end))
            ]
            data, _ = await api.ingest(sid, user, body, wait=False)
            if data is None:
                raise SystemExit(f"ingest failed: {api.errors.as_json()}")
            i += len(body)
    ok, _ = await wait_indexed(api, [(s, user) for s in sessions], timeout=7200)
    if not ok:
        raise SystemExit("not indexed in time")
    return sessions


async def erase(api: Api, user: str) -> tuple[float, JSON]:
    start = time.perf_counter()
    resp = await api.client.delete(f"/v1/users/{user}", params={"wait": "false"})
    job_id = resp.json()["job_id"]
    while True:
        job = (await api.client.get(f"/v1/jobs/{job_id}")).json()
        if job["state"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.05)
    seconds = time.perf_counter() - start
    if job["state"] != "succeeded":
        raise SystemExit(f"erasure {job['state']}: {job}")
    return seconds, job["result"]


async def main_async(args: argparse.Namespace) -> int:
    print_machine(machine_facts())
    run = uuid.uuid4().hex[:8]
    user, marker = f"erasee-{run}", f"ZQMARK{run}"
    async with Api(args.url, args.api_key, timeout=600) as api:
        if not await wait_ready(api, 120):
            print("server not ready", file=sys.stderr)
            return 1
        if args.bystander:
            t = time.perf_counter()
            await load(api, f"bystander-{run}", f"KEEPME{run}", args.bystander)
            print(f"bystander: {args.bystander} messages in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        await load(api, user, marker, args.messages)
        print(f"user: {args.messages} messages ingested and indexed in "
              f"{time.perf_counter() - t:.1f} s")  # fmt: skip
        before = on_disk(args.data_dir, marker)
        print(f"before: the marker {sum(before.values())} times in {len(before)} files")
        seconds, receipt = await erase(api, user)
        print(f"erasure: {seconds:.2f} s; receipt {receipt}")
        after, ids = on_disk(args.data_dir, marker), on_disk(args.data_dir, user)
        print(f"after: the marker {sum(after.values())} times {after}; "
              f"the user id {sum(ids.values())} times {ids}")  # fmt: skip
        if args.bystander:
            kept = on_disk(args.data_dir, f"KEEPME{run}")
            print(f"the bystander's marker: {sum(kept.values())} times")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--url", default="http://127.0.0.1:8731", help="Strata base URL")
    p.add_argument("--api-key", default=None)
    p.add_argument("--data-dir", type=Path, required=True, help="the server's STRATA_DATA_DIR")
    p.add_argument("--messages", type=int, default=20_000, help="the erased user's messages")
    p.add_argument("--bystander", type=int, default=0, help="another user's messages, first")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main_async(parse_args())))
