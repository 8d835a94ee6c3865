"""`/docs` and `/redoc` work without internet: every asset they load is the service's own."""

from __future__ import annotations

import re

import pytest

from tests.conftest import Running

ASSET = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*'([^']+)'""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_nothing_from_another_host(page: str, embedded_app: Running) -> None:
    html = await embedded_app.client.get(page)
    assert html.status_code == 200
    assert "://" not in html.text, "the page names another host"
    assets = [a or b for a, b in ASSET.findall(html.text)]
    assert any(a.endswith(".js") for a in assets), assets
    for asset in assets:
        assert asset.startswith("/"), asset
        assert not asset.startswith("//"), asset
        fetched = await embedded_app.client.get(asset)
        assert fetched.status_code == 200, asset
        assert fetched.content
