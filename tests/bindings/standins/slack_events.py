"""A client that calls an Events API endpoint the way Slack does: HMAC-SHA256 v0 signatures over
`v0:{timestamp}:{body}` with the signing secret, retries with `X-Slack-Retry-Num`. Scriptable:
forged signatures, stale timestamps, tampered bodies."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import httpx


def slack_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """`v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}`, as Slack computes it."""
    base = b"v0:%s:%s" % (timestamp.encode(), body)
    return "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()


class SlackEventsClient:
    def __init__(self, http: httpx.AsyncClient, url: str, signing_secret: str) -> None:
        self._http = http
        self._url = url
        self._secret = signing_secret.encode()

    async def send(
        self,
        payload: dict[str, Any],
        *,
        timestamp: int | None = None,
        retry_num: int | None = None,
        forge: bool = False,
        tamper: bool = False,
    ) -> httpx.Response:
        body = json.dumps(payload).encode()
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = slack_signature(b"not-the-secret" if forge else self._secret, stamp, body)
        if tamper:
            body = body.replace(b"}", b', "extra": 1}', 1)
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        return await self._http.post(self._url, content=body, headers=headers)

    async def url_verification(self, challenge: str) -> httpx.Response:
        return await self.send(
            {"token": "verification-token", "challenge": challenge, "type": "url_verification"}
        )

    async def interactive(self, url: str, payload: dict[str, Any], *, forge: bool = False) -> httpx.Response:
        """Post an interaction to the interactivity URL `url` as Slack does: a signed form whose
        one field, `payload`, is the JSON payload."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        stamp = str(int(time.time()))
        signature = slack_signature(b"not-the-secret" if forge else self._secret, stamp, body)
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
        }
        return await self._http.post(url, content=body, headers=headers)
