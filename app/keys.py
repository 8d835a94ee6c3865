"""Manage API keys from a shell, on the database the settings name (docs/security.md):

    python -m app.keys create --tenant acme [--user user-42] [--scopes read,write] [--name N]
    python -m app.keys list [--tenant acme] [--revoked]
    python -m app.keys revoke <key id>

`create` prints the key once (only its hash is stored). A running server takes a revocation
within `key_cache_seconds`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Sequence
from typing import cast

from pydantic import ValidationError

from app.core.auth import Scope, parse_scopes
from app.errors import AppError
from app.schemas.keys import KeyCreate, KeyOut
from app.settings import Settings
from app.stores.db import Database, create_engine, migrate
from app.wiring import build_key_service


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app.keys", description="Manage API keys.")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="create a key and print it (once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", help="bind the key to this user id")
    create.add_argument("--scopes", default="read,write", help="read, write, admin (comma list)")
    create.add_argument("--name", default="")
    create.add_argument("--rate", type=float, help="requests per second (token bucket)")
    create.add_argument("--burst", type=int, help="the bucket's size")
    listing = commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant", help="one tenant's keys (default: every tenant's)")
    listing.add_argument("--revoked", action="store_true", help="include revoked keys")
    revoke = commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id", type=uuid.UUID)
    return parser


def _line(key: KeyOut) -> str:
    state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
    user = f" user={key.user_id}" if key.user_id else ""
    rate = f" rate={key.rate_limit_per_second}/s" if key.rate_limit_per_second else ""
    name = f" name={key.name!r}" if key.name else ""
    return f"{key.id}  tenant={key.tenant} scopes={','.join(key.scopes)}{user}{rate}{name}  {state}"


async def run(argv: Sequence[str], settings: Settings) -> int:
    args = _parser().parse_args(argv)
    if settings.auto_migrate:
        await migrate(settings.database_dsn)
    db = Database(create_engine(settings.database_dsn))
    keys = build_key_service(db, settings)
    try:
        if args.command == "create":
            body = KeyCreate(
                tenant=args.tenant,
                user_id=args.user,
                scopes=cast("list[Scope]", sorted(parse_scopes(args.scopes))),
                name=args.name,
                rate_limit_per_second=args.rate,
                rate_limit_burst=args.burst,
            )
            created = await keys.create(args.tenant, body)
            print(_line(created))
            print(created.key)
            print("Keep the key now: it is not stored and cannot be shown again.", file=sys.stderr)
        elif args.command == "list":
            cursor = None
            while True:
                page = await keys.page(args.tenant, cursor, 200, args.revoked)
                for key in page.items:
                    print(_line(key))
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        else:
            revoked = await keys.revoke(None, args.key_id)
            print(f"{revoked.id}  revoked {revoked.revoked_at.isoformat()}")
    except (AppError, ValidationError, ValueError) as exc:
        print(f"error: {getattr(exc, 'detail', exc)}", file=sys.stderr)
        return 1
    finally:
        await db.close()
    return 0


def main() -> None:
    sys.exit(asyncio.run(run(sys.argv[1:], Settings())))


if __name__ == "__main__":
    main()
