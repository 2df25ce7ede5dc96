"""A client that calls an Interactions endpoint the way Discord does: every request signed with
a real Ed25519 key over `timestamp + body`."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_ids = itertools.count(3_000_000_000_000_000_000)


class InteractionsClient:
    def __init__(self, http: httpx.AsyncClient, url: str, *, application_id: str = "2000") -> None:
        self._http = http
        self._url = url
        self.application_id = application_id
        self._key = Ed25519PrivateKey.generate()

    @property
    def public_key_hex(self) -> str:
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    async def post(
        self,
        interaction: dict[str, Any],
        *,
        timestamp: str | None = None,
        tamper: bool = False,
        other_key: bool = False,
    ) -> httpx.Response:
        body = json.dumps(interaction).encode()
        stamp = timestamp or str(int(time.time()))
        key = Ed25519PrivateKey.generate() if other_key else self._key
        signature = key.sign(stamp.encode() + body).hex()
        if tamper:
            body = body.replace(b'"type"', b'"tipe"', 1)
        headers = {
            "X-Signature-Ed25519": signature,
            "X-Signature-Timestamp": stamp,
            "Content-Type": "application/json",
        }
        return await self._http.post(self._url, content=body, headers=headers)

    async def ping(self, **kwargs: Any) -> httpx.Response:
        return await self.post(
            {"id": str(next(_ids)), "type": 1, "application_id": self.application_id}, **kwargs
        )

    async def command(
        self,
        name: str,
        options: list[dict[str, Any]],
        *,
        user_id: str = "42",
        channel_id: str = "500",
        guild_id: str | None = None,
    ) -> httpx.Response:
        interaction: dict[str, Any] = {
            "id": str(next(_ids)),
            "type": 2,
            "application_id": self.application_id,
            "token": "interaction-token",
            "channel_id": channel_id,
            "data": {"id": "777", "name": name, "type": 1, "options": options},
        }
        user = {"id": user_id, "username": "alice"}
        if guild_id is not None:
            interaction["guild_id"] = guild_id
            interaction["member"] = {"user": user, "roles": []}
        else:
            interaction["user"] = user
        return await self.post(interaction)
