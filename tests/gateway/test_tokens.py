"""Named tokens over a real SQLite store: only the secret's hash is kept, names are unique, and
revocation closes the connections a token authenticated (and refuses one racing it)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.tokens import SECRET_PREFIX, Closer, Tokens
from sessions import Store
from sessions.errors import Conflict
from sessions.schema import gateway_tokens


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.open(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}") as opened:
        yield opened


async def test_a_token_is_stored_as_the_hash_of_its_secret(store: Store) -> None:
    tokens = Tokens(store.database)
    token, secret = await tokens.store.create("viewer", ["operator.read", "operator.read"])
    assert secret.startswith(SECRET_PREFIX) and len(secret) > 40
    assert token.scopes == ("operator.read",)
    async with store.database.read() as conn:
        rows = [dict(r._mapping) for r in (await conn.execute(select(gateway_tokens))).all()]
    assert rows == [
        {
            "name": "viewer",
            "secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
            "scopes": "operator.read",
            "created_at": token.created_at,
        }
    ]
    assert secret not in repr(rows)
    found = await tokens.store.find(secret)
    assert found is not None and found.name == "viewer" and found.grants == {"operator.read"}
    assert await tokens.store.find(secret + "x") is None


async def test_names_and_scopes_are_checked(store: Store) -> None:
    tokens = Tokens(store.database)
    await tokens.store.create("ci", ["operator.write"])
    with pytest.raises(Conflict, match="exists"):
        await tokens.store.create("ci", ["operator.read"])
    with pytest.raises(ValueError, match="unknown scope 'root'"):
        await tokens.store.create("other", ["root"])
    with pytest.raises(ValueError, match="token name"):
        await tokens.store.create("bad name\n", ["operator.read"])
    assert [t.name for t in await tokens.store.list()] == ["ci"]


async def test_revoking_closes_the_connections_of_that_token_only(store: Store) -> None:
    tokens = Tokens(store.database)
    doomed, _ = await tokens.store.create("doomed", ["operator.read"])
    kept, _ = await tokens.store.create("kept", ["operator.read"])
    closed: list[str] = []

    def closer(conn_id: str) -> Closer:
        async def close() -> None:
            closed.append(conn_id)

        return close

    assert tokens.attach(doomed, "c1", closer("c1"))
    assert tokens.attach(doomed, "c2", closer("c2"))
    assert tokens.attach(kept, "c3", closer("c3"))
    assert tokens.connections(doomed) == 2
    revoked = await tokens.revoke("doomed", spare="c2")
    assert revoked is not None
    count, own = revoked
    assert count == 1 and closed == ["c1"] and own is not None  # c2 is closed by the caller
    await own()
    assert closed == ["c1", "c2"]
    assert tokens.connections(kept) == 1 and await tokens.revoke("doomed") is None
    # A connection that looked the token up before the revoke cannot attach after it.
    assert not tokens.attach(doomed, "c4", closer("c4"))
