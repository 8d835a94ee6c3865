"""The console (/console) in a real browser: Debian's headless chromium driven over the
DevTools protocol (tests/e2e/cdp.py) against a real server with keys. It logs in with a key,
opens a user, runs a recall in the playground and reads the results from the page, sees the
forgetting view's curves, checks that a read-only key is shown no write button and cannot
change anything, and that no page asked any host but the service for anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.console.auth import COOKIE, csrf_token
from tests.e2e.cdp import CHROMIUM, Browser
from tests.e2e.serving import clean_env, free_port, serving, uvicorn

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-secret-for-console-tests"
USER = "ana"
pytestmark = pytest.mark.e2e

TURNS = [
    "I moved to Lisbon last spring and I love the light there.",
    "My sister Marta is a nurse in Porto.",
    "I am allergic to peanuts, so no satay for me.",
    "On weekends I restore old bicycles in my garage.",
    "I started learning the cello in September.",
    "My favourite book is The Left Hand of Darkness.",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = clean_env(
        STRATA_DATA_DIR=str(tmp_path_factory.mktemp("console-data")),
        STRATA_AUTH_MODE="keys",
        STRATA_ADMIN_KEY=ADMIN,
    )
    log = tmp_path_factory.mktemp("console-log") / "server.log"
    with serving(uvicorn(port), port, env, log) as url:
        yield url


def _key(url: str, *scopes: str) -> str:
    made = httpx.post(
        f"{url}/v1/admin/keys",
        json={"scopes": list(scopes)},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert made.status_code == 201, made.text
    key: str = made.json()["key"]
    return key


@pytest.fixture(scope="module")
def keys(server: str) -> dict[str, str]:
    """A writer and a reader, and ana's turns stored and promoted to memories."""
    writer, reader = _key(server, "read", "write"), _key(server, "read")
    auth = {"Authorization": f"Bearer {writer}"}
    sent = httpx.post(
        f"{server}/v1/sessions/s1/messages",
        json={
            "user_id": USER,
            "messages": [{"role": "user", "content": t} for t in TURNS],
            "wait": True,
        },
        headers=auth,
        timeout=60,
    )
    assert sent.status_code in (200, 201, 202), sent.text
    deadline = time.monotonic() + 60
    while True:  # promotion runs in the server's worker
        page = httpx.get(
            f"{server}/v1/memories", params={"user_id": USER}, headers=auth, timeout=10
        ).json()
        if len(page["items"]) >= len(TURNS):
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.3)
    return {"writer": writer, "reader": reader}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: the console's browser test needs Debian's chromium "
        "(`apt-get update && apt-get install -y chromium`, as .ci/run does)"
    )
    with Browser.start() as b:
        yield b


def _log_in(browser: Browser, url: str, key: str) -> None:
    browser.goto(f"{url}/console/login")
    browser.submit(
        f"document.querySelector('input[name=key]').value = {key!r};"
        "document.querySelector('form').submit()"
    )


def _only_the_service(browser: Browser, url: str) -> None:
    origin = urlsplit(url).netloc
    others = [u for u in browser.requested_urls() if urlsplit(u).netloc not in (origin, "")]
    assert others == []


def test_a_key_opens_the_console_and_the_playground_recalls(
    server: str, keys: dict[str, str], browser: Browser
) -> None:
    browser.goto(f"{server}/console/")
    assert browser.eval("location.pathname") == "/console/login"  # no key yet
    _log_in(browser, server, keys["writer"])
    assert browser.eval("location.pathname") == "/console/"
    users = browser.eval("[...document.querySelectorAll('#users a')].map(a => a.textContent)")
    assert USER in users

    browser.submit(
        f"[...document.querySelectorAll('#users a')].find(a => a.textContent == {USER!r}).click()"
    )
    assert browser.eval("location.pathname") == f"/console/users/{USER}"
    assert browser.eval("document.querySelectorAll('#sessions a').length") == 1

    browser.goto(f"{server}/console/users/{USER}/recall")
    browser.submit(
        "document.querySelector('input[name=q]').value = 'Where does she live?';"
        "document.querySelector('#recall-form').requestSubmit()"
    )
    results: list[dict[str, Any]] = browser.eval(
        "[...document.querySelectorAll('tr.result')].map(r => ({"
        "  content: r.querySelector('.content').textContent,"
        "  bars: [...r.querySelectorAll('.meter > span')].map(s => s.style.width)}))"
    )
    assert results, "the playground showed no result"
    assert "Lisbon" in results[0]["content"]
    assert all(len(r["bars"]) == 4 and all(w.endswith("%") for w in r["bars"]) for r in results)
    assert browser.eval("document.querySelector('#searched').textContent") == "Where does she live?"

    # A writer sees the write actions, each behind a confirm page.
    browser.goto(f"{server}/console/users/{USER}/memories")
    assert browser.eval("document.querySelectorAll('.write').length") > 0
    _only_the_service(browser, server)


def test_the_forgetting_view_draws_retention_curves(
    server: str, keys: dict[str, str], browser: Browser
) -> None:
    _log_in(browser, server, keys["reader"])
    browser.goto(f"{server}/console/users/{USER}/forgetting")
    curves: list[str] = browser.eval(
        "[...document.querySelectorAll('svg#retention polyline')]"
        ".map(p => p.getAttribute('points'))"
    )
    rows = browser.eval("document.querySelectorAll('#retention-table tr').length") - 1
    assert len(curves) == rows >= len(TURNS)  # one curve per memory of the page
    for points in curves:
        pairs = [tuple(map(float, p.split(","))) for p in points.split()]
        assert len(pairs) > 10
        ys = [y for _, y in pairs]
        assert ys == sorted(ys)  # retention only falls: y grows down the SVG
        assert ys[0] < ys[-1]
    assert browser.eval("document.querySelector('svg#retention #threshold') !== null")
    browser.submit("document.querySelector('#run-dry').click()")
    assert "examined" in browser.eval("document.querySelector('#dry-run').textContent")
    _only_the_service(browser, server)


PAGES = [
    "",
    "/memories",
    "/summaries",
    "/graph",
    "/recall?q=cello",
    "/forgetting",
    "/context?session_id=s1",
]


def test_a_read_only_key_sees_no_write_button_and_changes_nothing(
    server: str, keys: dict[str, str], browser: Browser
) -> None:
    _log_in(browser, server, keys["reader"])
    for page in PAGES:
        browser.goto(f"{server}/console/users/{USER}{page}")
        assert browser.eval("document.querySelector('.error')") is None, page
        assert browser.eval("document.querySelectorAll('.write, button#confirm').length") == 0, page
    _only_the_service(browser, server)

    # Nor by posting the form itself, with the cookie and a CSRF token that fits it.
    memory = httpx.get(
        f"{server}/v1/memories",
        params={"user_id": USER, "limit": 1},
        headers={"Authorization": f"Bearer {keys['reader']}"},
    ).json()["items"][0]
    reader = httpx.Client(base_url=server, cookies={COOKIE: keys["reader"]})
    confirm = reader.get(
        f"/console/users/{USER}/confirm", params={"action": "forget", "memory_id": memory["id"]}
    )
    assert confirm.status_code == 403
    posted = reader.post(
        f"/console/users/{USER}/act",
        data={"csrf": csrf_token(keys["reader"]), "action": "forget", "memory_id": memory["id"]},
    )
    assert posted.status_code == 403
    assert "insufficient_scope" in posted.text
    still = httpx.get(
        f"{server}/v1/memories/{memory['id']}",
        params={"user_id": USER},
        headers={"Authorization": f"Bearer {keys['reader']}"},
    )
    assert still.status_code == 200


def test_a_writer_forgets_a_memory_only_with_the_form_token(
    server: str, keys: dict[str, str]
) -> None:
    auth = {"Authorization": f"Bearer {keys['writer']}"}
    memory = httpx.get(
        f"{server}/v1/memories", params={"user_id": USER, "limit": 1}, headers=auth
    ).json()["items"][0]
    writer = httpx.Client(base_url=server, cookies={COOKIE: keys["writer"]})
    form = {"action": "forget", "memory_id": memory["id"]}
    forged = writer.post(f"/console/users/{USER}/act", data={**form, "csrf": "0" * 64})
    assert forged.status_code == 422
    assert (
        httpx.get(
            f"{server}/v1/memories/{memory['id']}", params={"user_id": USER}, headers=auth
        ).status_code
        == 200
    )
    done = writer.post(
        f"/console/users/{USER}/act", data={**form, "csrf": csrf_token(keys["writer"])}
    )
    assert done.status_code == 303
    assert (
        httpx.get(
            f"{server}/v1/memories/{memory['id']}", params={"user_id": USER}, headers=auth
        ).status_code
        == 404
    )


def test_a_key_bound_to_another_user_is_refused(server: str, keys: dict[str, str]) -> None:
    made = httpx.post(
        f"{server}/v1/admin/keys",
        json={"scopes": ["read"], "user_id": "bob"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert made.status_code == 201, made.text
    bob = httpx.Client(base_url=server, cookies={COOKIE: made.json()["key"]})
    assert bob.get(f"/console/users/{USER}/memories").status_code == 403
    users = bob.get("/console/")  # straight to bob's own page
    assert users.status_code == 303
    assert users.headers["location"] == "/console/users/bob"
    assert httpx.get(f"{server}/console/users/{USER}").status_code == 303  # no key: login


def test_the_console_is_not_in_the_openapi(server: str) -> None:
    spec = httpx.get(f"{server}/openapi.json").json()
    assert not [p for p in spec["paths"] if p.startswith("/console")]
