"""Screenshots of the console's main pages for docs/console.md (1280x800 PNG), taken with
the same DevTools client as the browser test (tests/e2e/cdp.py):

    python -m tests.e2e.console_screenshots --url http://127.0.0.1:8000 --key sk_strata_... \
        --user caroline --session conv0-session1 --query "What did Caroline research?"
"""

from __future__ import annotations

import argparse
import struct
import zlib
from pathlib import Path
from urllib.parse import quote, urlencode

from tests.e2e.cdp import Browser


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--query", required=True)
    p.add_argument("--entity", default=None)
    p.add_argument("--out", type=Path, default=Path("docs/console"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    user = f"{args.url}/console/users/{quote(args.user)}"
    pages = {
        "users": f"{args.url}/console/",
        "user": user,
        "session": f"{user}/sessions/{quote(args.session)}",
        "memories": f"{user}/memories",
        "summaries": f"{user}/summaries",
        "graph": f"{user}/graph?" + urlencode({"entity": args.entity} if args.entity else {}),
        "recall": f"{user}/recall?" + urlencode({"q": args.query}),
        "forgetting": f"{user}/forgetting?dry=1",
        "context": f"{user}/context?" + urlencode({"session_id": args.session, "budget": 1500}),
    }
    with Browser.start() as browser:
        browser.goto(f"{args.url}/console/login")
        browser.submit(
            f"document.querySelector('input[name=key]').value = {args.key!r};"
            "document.querySelector('form').submit()"
        )
        for name, url in pages.items():
            browser.goto(url)
            path = args.out / f"{name}.png"
            browser.screenshot(path)
            recompress(path)
            print(name, path.stat().st_size)
        outside = [u for u in browser.requested_urls() if not u.startswith(args.url)]
        print("requests to other hosts:", outside)


def recompress(path: Path) -> None:
    """The PNG's image data deflated again at level 9 (Chromium writes it fast, not small);
    the pixels are unchanged."""
    data = path.read_bytes()
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        chunks.append((kind, data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    image = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    out = [data[:8]]
    for kind, body in chunks:
        if kind == b"IDAT":
            if out[-1] == b"IDAT-written":
                continue
            body = zlib.compress(image, 9)
        piece = kind + body
        out.append(struct.pack(">I", len(body)) + piece + struct.pack(">I", zlib.crc32(piece)))
        if kind == b"IDAT":
            out.append(b"IDAT-written")
    path.write_bytes(b"".join(p for p in out if p != b"IDAT-written"))


if __name__ == "__main__":
    main()
