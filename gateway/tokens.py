"""Named, scoped tokens: credentials an admin hands out with fewer rights than the root token.

A token has a name (what `tokens list` shows and `tokens revoke` takes), the operator scopes it
grants, and a secret shown once, when it is created. Only the SHA-256 of the secret is stored
(table `gateway_tokens`, migration 0004). The secret is 256 random bits, so nothing is gained by
a slow password hash: no dictionary reaches it, and a fast hash lets `connect` find the token by
an indexed lookup without spending CPU on every wrong guess. A connection authenticated by a
token gets the scopes it asks for that the token grants (with their implications: a token with
`operator.write` grants `operator.read`).

`Tokens` also knows which open connections use which token: revoking a token deletes it and
closes those connections at once (1008 "token revoked"). A connection registers with `attach`
after its credential was checked and before `hello-ok`; `attach` refuses a token revoked in the
meantime, so a connect racing a revoke never outlives it. That registry lives for the process;
the revoked-token set only holds the digests revoked since start.

Store errors are `sessions.errors` (Conflict for a name in use, StoreUnavailable when busy).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

import msgspec
from sqlalchemy import RowMapping, delete, insert, select
from sqlalchemy import exc as sa_exc

from gateway.protocol.methods import OPERATOR_SCOPES, expand_scopes
from sessions.db import Database
from sessions.errors import Conflict
from sessions.schema import gateway_tokens

SECRET_PREFIX = "gwt_"
"""Every token secret starts with this (so a leaked one is recognisable)."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NAME_RULE = "1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"

Closer = Callable[[], Coroutine[Any, Any, None]]
"""Closes one connection (with 1008 "token revoked")."""


def secret_digest(secret: str) -> str:
    """The stored form of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def check_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """The scopes, deduplicated in order. Raises ValueError naming an unknown one or for none."""
    out = tuple(dict.fromkeys(scopes))
    unknown = [s for s in out if s not in OPERATOR_SCOPES]
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r} (known: {', '.join(sorted(OPERATOR_SCOPES))})")
    if not out:
        raise ValueError("a token needs at least one scope")
    return out


class NamedToken(msgspec.Struct, frozen=True):
    """A stored token (never its secret)."""

    name: str
    scopes: tuple[str, ...]
    """As granted at creation, in that order."""
    created_at: int
    """Unix milliseconds."""
    digest: str

    @property
    def grants(self) -> frozenset[str]:
        """Every scope the token grants, implications included."""
        return expand_scopes(self.scopes)


class TokenStore:
    """The `gateway_tokens` table over `database`. `clock` is Unix milliseconds (a seam)."""

    def __init__(self, database: Database, *, clock: Callable[[], int] | None = None) -> None:
        self._db = database
        self._clock = clock or (lambda: int(time.time() * 1000))

    async def create(self, name: str, scopes: Sequence[str]) -> tuple[NamedToken, str]:
        """Store a new token; returns it with its secret (not kept anywhere). Raises ValueError
        for a bad name or scopes, Conflict when the name is taken."""
        if not NAME_PATTERN.match(name):
            raise ValueError(f"a token name is {NAME_RULE}")
        granted = check_scopes(scopes)
        secret = new_secret()
        token = NamedToken(name, granted, self._clock(), secret_digest(secret))
        row = {
            "name": name,
            "secret_sha256": token.digest,
            "scopes": ",".join(granted),
            "created_at": token.created_at,
        }
        taken = f"a token named {name!r} exists; revoke it first or pick another name"
        same_name = select(gateway_tokens.c.name).where(gateway_tokens.c.name == name)
        async with self._db.write() as conn:
            if (await conn.execute(same_name)).first() is not None:
                raise Conflict(taken)
            try:
                await conn.execute(insert(gateway_tokens), [row])
            except sa_exc.IntegrityError as exc:  # created by another node meanwhile
                raise Conflict(taken) from exc
        return token, secret

    async def list(self) -> list[NamedToken]:
        """Every token, by name."""
        async with self._db.read() as conn:
            rows = (await conn.execute(select(gateway_tokens).order_by(gateway_tokens.c.name))).all()
        return [_token(row._mapping) for row in rows]

    async def find(self, secret: str) -> NamedToken | None:
        """The token whose secret this is, or None."""
        query = select(gateway_tokens).where(gateway_tokens.c.secret_sha256 == secret_digest(secret))
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _token(row._mapping)

    async def delete(self, name: str) -> NamedToken | None:
        """Delete the token; the deleted token, or None when there was none by that name."""
        async with self._db.write() as conn:
            row = (await conn.execute(select(gateway_tokens).where(gateway_tokens.c.name == name))).first()
            if row is None:
                return None
            await conn.execute(delete(gateway_tokens).where(gateway_tokens.c.name == name))
        return _token(row._mapping)


def _token(row: RowMapping) -> NamedToken:
    return NamedToken(
        name=str(row["name"]),
        scopes=tuple(s for s in str(row["scopes"]).split(",") if s),
        created_at=int(row["created_at"]),
        digest=str(row["secret_sha256"]),
    )


class Tokens:
    """The tokens and the open connections that use each of them."""

    def __init__(self, database: Database) -> None:
        self.store = TokenStore(database)
        self._live: dict[str, dict[str, Closer]] = {}
        self._revoked: set[str] = set()

    def attach(self, token: NamedToken, conn_id: str, close: Closer) -> bool:
        """Record that connection `conn_id` uses `token`; False when the token was revoked since
        it was looked up (the connection must then be refused)."""
        if token.digest in self._revoked:
            return False
        self._live.setdefault(token.digest, {})[conn_id] = close
        return True

    def detach(self, token: NamedToken, conn_id: str) -> None:
        live = self._live.get(token.digest)
        if live is not None:
            live.pop(conn_id, None)
            if not live:
                del self._live[token.digest]

    def connections(self, token: NamedToken) -> int:
        """Open connections authenticated by `token`."""
        return len(self._live.get(token.digest, ()))

    async def revoke(self, name: str, *, spare: str | None = None) -> tuple[int, Closer | None] | None:
        """Delete the token named `name` and close every connection using it (each close is
        bounded in time), except connection `spare`, whose closer is returned for the caller to
        run (after answering on it). `(connections closed, spare's closer or None)`; None when no
        token has that name."""
        token = await self.store.delete(name)
        if token is None:
            return None
        self._revoked.add(token.digest)
        live = self._live.pop(token.digest, {})
        own = live.pop(spare, None) if spare is not None else None
        await asyncio.gather(*(close() for close in live.values()), return_exceptions=True)
        return len(live), own
