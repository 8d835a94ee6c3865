"""Strata from Python through a client generated from openapi/openapi.json (docs/clients.md).

    openapi-python-client generate --path openapi/openapi.json --meta none \
        --output-path strata_client
    python examples/python_client.py http://127.0.0.1:8000 [api-key]

It stores a few turns, recalls from them, builds a context, and reads two errors as the
service's `Problem`s. Each line it prints is `name: value`.
"""

from __future__ import annotations

import sys

from strata_client import AuthenticatedClient, Client
from strata_client.api.context import get_context
from strata_client.api.recall import recall
from strata_client.api.sessions import add_messages, get_session
from strata_client.models import (
    ContextRequest,
    ContextResponse,
    IngestRequest,
    IngestResponse,
    MessageIn,
    MessageInRole,
    Problem,
    RecallRequest,
    RecallResponse,
)


def main(base_url: str, api_key: str | None = None) -> None:
    client: Client | AuthenticatedClient = (
        AuthenticatedClient(base_url=base_url, token=api_key)
        if api_key
        else Client(base_url=base_url)
    )
    with client:
        added = add_messages.sync(
            "trip",
            client=client,
            body=IngestRequest(
                user_id="ana",
                messages=[
                    MessageIn(role=MessageInRole.USER, content="I moved to Lisbon last May."),
                    MessageIn(role=MessageInRole.ASSISTANT, content="Lisbon is lovely in spring."),
                ],
                wait=True,  # answer once the turns can be recalled
            ),
        )
        assert isinstance(added, IngestResponse), added
        print(f"ingested: {added.last_seq}")

        found = recall.sync(
            client=client, body=RecallRequest(user_id="ana", query="Which city did I move to?")
        )
        assert isinstance(found, RecallResponse), found
        print(f"recalled: {found.results[0].content}")

        context = get_context.sync(
            "trip", client=client, body=ContextRequest(user_id="ana", token_budget=500)
        )
        assert isinstance(context, ContextResponse), context
        print(f"context tokens: {context.tokens.total} of {context.token_budget}")

        # Errors are problem+json: the same `Problem` model whatever the status.
        missing = get_session.sync("no-such-session", client=client, user_id="ana")
        assert isinstance(missing, Problem), missing
        print(f"404: {missing.code}")
        invalid = recall.sync(client=client, body=RecallRequest(user_id="ana", query="x", top_k=0))
        assert isinstance(invalid, Problem), invalid
        print(f"422: {invalid.code} {[e.field for e in invalid.errors or []]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
