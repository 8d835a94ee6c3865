"""The console's pages on both stacks (open mode: no key, the cookie anchors the CSRF token),
and the tenant's user list it pages through (app/services/directory.py)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from app.console import routes
from app.console.auth import COOKIE
from app.services.directory import DirectoryService
from tests.conftest import Running, post_messages, turn


async def test_the_users_of_a_tenant_come_in_id_order_a_page_at_a_time(
    running: Running, ids: Callable[[str], str]
) -> None:
    prefix = ids("dir")
    users = [f"{prefix}-{n}" for n in ("a", "b", "c", "d", "e")]
    for user in reversed(users):
        await post_messages(running, "s", user, [turn("hello")])
    await post_messages(running, "s", ids("other"), [turn("hello")])
    directory: DirectoryService = running.state["services"].directory
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page = await directory.users("default", prefix, cursor, 2)
        seen.extend(u.id for u in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == users
    sessions = await directory.sessions("default", users[0], None, 10)
    assert [s.id for s in sessions.items] == ["s"]


async def test_an_open_console_pages_memories_and_forgets_only_with_the_form_token(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("console")
    await post_messages(running, "s1", user, [turn("I keep bees on my roof in Ghent.")])
    listed = await running.client.get("/v1/memories", params={"user_id": user})
    memory_id = listed.json()["items"][0]["id"]
    client = running.client
    client.cookies.clear()

    page = await client.get(f"/console/users/{user}/memories")
    assert page.status_code == 200
    assert "bees" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    cookie = page.cookies[COOKIE]  # set by the first page: it anchors the CSRF token
    assert "httponly" in page.headers["set-cookie"].lower()
    assert "samesite=strict" in page.headers["set-cookie"].lower()
    client.cookies.set(COOKIE, cookie, path="/console")

    confirm = await client.get(
        f"/console/users/{user}/confirm", params={"action": "forget", "memory_id": memory_id}
    )
    assert confirm.status_code == 200
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm.text)
    assert token is not None
    form = {"action": "forget", "memory_id": memory_id}
    stale = await client.post(f"/console/users/{user}/act", data={**form, "csrf": "bad"})
    assert stale.status_code == 422
    done = await client.post(f"/console/users/{user}/act", data={**form, "csrf": token.group(1)})
    assert done.status_code == 303
    gone = await client.get(f"/v1/memories/{memory_id}", params={"user_id": user})
    assert gone.status_code == 404
    client.cookies.clear()


async def test_every_page_of_a_user_renders(running: Running, ids: Callable[[str], str]) -> None:
    user = ids("pages")
    await post_messages(running, "s1", user, [turn("My dog Rex loves the beach.")])
    for path in (
        "",
        "/sessions/s1",
        "/memories",
        "/summaries",
        "/graph?q=rex",
        "/recall?q=dog&as_of=2020-01-01T00:00:00Z&min_relevance=0",
        "/forgetting?dry=1",
        "/context?session_id=s1&budget=500",
    ):
        page = await running.client.get(f"/console/users/{user}{path}")
        assert page.status_code == 200, (path, page.text)
        assert 'class="error"' not in page.text, path
        assert "http://" not in page.text, path  # nothing from elsewhere
        assert "https://" not in page.text, path
    bad = await running.client.get(f"/console/users/{user}/summaries?level=yearly")
    assert bad.status_code == 422
    future = await running.client.get(
        f"/console/users/{user}/recall?q=dog&as_of=2999-01-01T00:00:00Z"
    )
    assert "must not lie more than 5 minutes in the future" in future.text  # shown, not a 500
    running.client.cookies.clear()


async def test_erasing_a_user_from_the_console_leaves_nothing_listed(
    running: Running, ids: Callable[[str], str]
) -> None:
    user = ids("erase")
    await post_messages(running, "s1", user, [turn("Forget all of this, please.")])
    client = running.client
    client.cookies.clear()
    confirm = await client.get(f"/console/users/{user}/confirm", params={"action": "erase"})
    assert confirm.status_code == 200
    assert "cannot be undone" in confirm.text
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm.text)
    assert token is not None
    client.cookies.set(COOKIE, confirm.cookies[COOKIE], path="/console")
    done = await client.post(
        f"/console/users/{user}/act", data={"action": "erase", "csrf": token.group(1)}
    )
    assert done.status_code == 303
    assert "erased=succeeded" in done.headers["location"]
    directory: DirectoryService = running.state["services"].directory
    assert (await directory.users("default", user, None, 10)).items == []
    client.cookies.clear()


async def test_the_forgetting_view_reads_a_page_and_a_bounded_dry_run(
    running: Running, ids: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user with more memories than a page and than the dry run's sample: the view lists
    one page with a next cursor, and the dry run says it read only the first ones."""
    monkeypatch.setattr(routes, "PAGE", 2)
    monkeypatch.setattr(routes, "DRY_SAMPLE", 2)
    user = ids("bounded")
    await post_messages(
        running, "s1", user, [turn(f"Fact number {n}: I like colour {n}.") for n in range(4)]
    )
    listed = await running.client.get("/v1/memories", params={"user_id": user, "limit": 10})
    assert len(listed.json()["items"]) > 2
    page = await running.client.get(f"/console/users/{user}/forgetting?dry=1")
    assert page.status_code == 200, page.text
    table = page.text.split('id="retention-table"')[1].split("</table>")[0]
    assert table.count("<tr>") - 1 == 2  # the header, then one row per memory of the page
    assert "Next page" in page.text
    assert "first 2 memories in the sweep" in page.text
    assert "2 examined" in page.text
    running.client.cookies.clear()
