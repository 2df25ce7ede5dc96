"""`POST /hooks/<name>`: webhook deliveries turned into agent runs.

Each `[webhooks.<name>]` table (`gateway.config.automation.WebhookConfig`) is a `Hook`. A
delivery is handled in this order, and the first check that fails answers:

1. the hook exists and is enabled (404), the method is POST (405), the body fits
   `max_body_bytes` (413, read no further);
2. the request proves itself: a signature over timestamp and body, or the bearer token
   (`gateway.automation.webhook_auth`; 401, also for a timestamp outside the replay window);
3. the hook's rate limit (429 with `Retry-After`); only proven requests spend it, so forged ones
   cannot starve the real sender;
4. the body is JSON (400);
5. the delivery is new: its `X-Gateway-Delivery` id and its signature are recorded with the run's
   input, in one transaction (`AutomationStore.delivery_claim`). One seen before answers 409 with
   the run it started, and runs nothing: a sender's retry runs once, a replay not at all;
6. the message (the hook's template filled from the body) goes to the hook's agent session
   (`Launcher`), and the answer is 202 `{"runId", "sessionKey"}`: the run happens after it.
   A daemon that is stopping or busy answers 503 with `Retry-After`; nothing was recorded.

The gateway's front door applies as to every HTTP request: the `Host` check and the security
headers come from the app's middleware, the head of the request from the door's limits.
Refusals are counted per hook and logged at most once per `REPORT_EVERY_S` per hook.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway.automation.delivery import Delivery
from gateway.automation.errors import DuplicateDelivery, Refused
from gateway.automation.launcher import Launcher, RunRequest
from gateway.automation.rate_limit import TokenBucket
from gateway.automation.store import AutomationStore
from gateway.automation.templates import check, render, render_key
from gateway.automation.webhook_auth import DELIVERY_HEADER, Credentials, verify
from gateway.config import DEFAULTS_SOURCE, GatewayConfig
from gateway.config.automation import WebhookConfig
from gateway.errors import ConfigError, ConfigProblem
from sessions.errors import SessionsError
from sessions.ids import new_id

if TYPE_CHECKING:
    from bindings import ReplyRoute

__all__ = ["Hook", "Webhooks", "load_hooks"]

log = structlog.get_logger("gateway.automation")

DELIVERY_KEEP_MS = 7 * 24 * 3600 * 1000
"""How long a delivery id is remembered: longer than any sender keeps retrying."""
MAX_DELIVERY_ID = 196
REPORT_EVERY_S = 10.0


@dataclass(eq=False)
class Hook:
    """A configured webhook with its secrets and its rate limit."""

    name: str
    config: WebhookConfig
    credentials: Credentials
    delivery: Delivery | None
    bucket: TokenBucket
    refused: int = 0
    accepted: int = 0
    _reported_at: float = field(default=float("-inf"), repr=False)


def load_hooks(
    config: GatewayConfig, env: Mapping[str, str], *, clock: Callable[[], float] = time.monotonic
) -> dict[str, Hook]:
    """The hooks of `[webhooks]`, their secrets read from `env`. Raises ConfigError naming each
    key whose variable is unset or whose template is malformed."""
    source = str(config.source_path) if config.source_path is not None else DEFAULTS_SOURCE
    problems: list[ConfigProblem] = []
    hooks: dict[str, Hook] = {}
    for name, hook in config.webhooks.items():
        where = f"webhooks.{name}"
        secrets: dict[str, str | None] = {}
        for key, variable in (("secret", hook.secret_env), ("token", hook.token_env)):
            secrets[key] = None
            if variable is None:
                continue
            value = env.get(variable)
            if not value:
                problems.append(
                    ConfigProblem(source, f"{where}.{key}_env", f"environment variable {variable} is not set")
                )
            secrets[key] = value or None
        for key, text in (("template", hook.template), ("session_key", hook.session_key)):
            if text is None:
                continue
            try:
                check(text)
            except ValueError as exc:
                problems.append(ConfigProblem(source, f"{where}.{key}", str(exc)))
        if hook.agent not in config.agent_ids:
            problems.append(ConfigProblem(source, f"{where}.agent", f"unknown agent {hook.agent!r}"))
        deliver = hook.deliver
        delivery = (
            Delivery(
                channel=deliver.channel,
                to=deliver.to.removeprefix("channel:"),
                account_id=deliver.account_id,
                thread_id=deliver.thread_id,
            )
            if deliver is not None
            else None
        )
        hooks[name] = Hook(
            name=name,
            config=hook,
            credentials=Credentials(secret=secrets["secret"], token=secrets["token"]),
            delivery=delivery,
            bucket=TokenBucket(hook.rate_per_minute / 60, hook.burst, clock=clock),
        )
    if problems:
        raise ConfigError(problems)
    return hooks


class Webhooks:
    """The ASGI app served under `/hooks`. `clock` is Unix seconds (signature timestamps)."""

    def __init__(
        self,
        hooks: Mapping[str, Hook],
        *,
        store: AutomationStore,
        launcher: Launcher,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hooks = dict(hooks)
        self._store = store
        self._launcher = launcher
        self._clock = clock

    def replace(self, hooks: Mapping[str, Hook]) -> None:
        """Serve `hooks` from now on (a config reload). A hook whose settings did not change
        keeps its rate limit's state."""
        kept = {}
        for name, hook in hooks.items():
            old = self.hooks.get(name)
            kept[name] = (
                old
                if old is not None and old.config == hook.config and old.credentials == hook.credentials
                else hook
            )
        self.hooks = kept

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(scope, receive)
        await response(scope, receive, send)

    async def _respond(self, scope: Scope, receive: Receive) -> Response:
        path = str(scope.get("path", ""))
        root = str(scope.get("root_path", ""))
        name = (path[len(root) :] if root and path.startswith(root) else path).strip("/")
        hook = self.hooks.get(name)
        try:
            if hook is None or not hook.config.enabled:
                raise Refused(404, f"no webhook named {name!r}")
            if scope.get("method") != "POST":
                raise Refused(405, "webhooks take POST")
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            body = await _read_body(receive, headers, hook.config.max_body_bytes)
            answer = await self.deliver(hook, headers, body)
        except Refused as exc:
            if hook is not None:
                self._report(hook, exc)
            retry = {"Retry-After": str(max(1, round(exc.retry_after_s)))} if exc.retry_after_s else None
            return JSONResponse({"ok": False, "error": exc.reason}, status_code=exc.status, headers=retry)
        except DuplicateDelivery as exc:
            return JSONResponse(
                {"ok": False, "error": "duplicate delivery: it was received before", "runId": exc.run_id},
                status_code=409,
            )
        return JSONResponse(answer, status_code=202)

    async def deliver(self, hook: Hook, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """Checks 2 to 6 of the module docstring for one delivery (lower-case `headers`).
        Returns the 202 answer; raises Refused or DuplicateDelivery."""
        config = hook.config
        proof = verify(hook.credentials, headers, body, now_s=self._clock(), window_s=config.replay_window_s)
        wait = hook.bucket.take()
        if wait is not None:
            raise Refused(429, "too many deliveries; slow down", retry_after_s=wait)
        try:
            payload = json.loads(body)
        except ValueError:
            raise Refused(400, "the body is not JSON") from None
        delivery_id = headers.get(DELIVERY_HEADER, "").strip()
        keys = self._dedupe_keys(config, delivery_id, proof.signature)
        names = [key for key, _ in keys]
        seen = await self._store.delivery_run(hook.name, names) if names else None
        if seen is not None:  # before a session is made for it; the claim settles races
            raise DuplicateDelivery(hook.name, seen)
        suffix = new_id()
        run_id = f"hook:{hook.name}:{suffix}"
        session_key = (
            render_key(config.session_key, payload) if config.session_key else f"hook:{hook.name}:{suffix}"
        )
        request = RunRequest(
            run_id=run_id,
            agent_id=config.agent,
            session_key=session_key,
            message=render(config.template, payload),
            claim=self._store.delivery_claim(hook.name, keys, run_id),
            source={"automation": "webhook", "hook": hook.name, "deliveryId": delivery_id or None},
            reply=self._reply(hook),
        )
        try:
            await self._launcher.launch(request)
        except DuplicateDelivery:
            raise DuplicateDelivery(hook.name, await self._store.delivery_run(hook.name, names)) from None
        except SessionsError as exc:
            if exc.retryable:
                raise Refused(503, str(exc), retry_after_s=(exc.retry_after_ms or 1000) / 1000) from None
            raise Refused(500, f"the run could not start: {exc}") from None
        hook.accepted += 1
        return {"ok": True, "status": "accepted", "runId": run_id, "sessionKey": session_key}

    def _dedupe_keys(
        self, config: WebhookConfig, delivery_id: str, signature: str | None
    ) -> list[tuple[str, int]]:
        """What identifies this delivery, each with how long it is remembered."""
        now_ms = int(self._clock() * 1000)
        keys: list[tuple[str, int]] = []
        if delivery_id:
            if len(delivery_id) > MAX_DELIVERY_ID or not delivery_id.isprintable():
                raise Refused(400, f"X-Gateway-Delivery must be 1 to {MAX_DELIVERY_ID} printable characters")
            keys.append((f"id:{delivery_id}", now_ms + DELIVERY_KEEP_MS))
        if signature is not None:
            keys.append((f"sig:{signature}", now_ms + int(2 * config.replay_window_s * 1000)))
        return keys

    def _reply(self, hook: Hook) -> tuple[str, ReplyRoute] | None:
        """The binding and route of the hook's delivery; None when it has none, or when no
        running binding fits (logged: the run still happens)."""
        if hook.delivery is None:
            return None
        replies = self._launcher.replies
        try:
            return hook.delivery.resolve(replies.running() if replies is not None else [])
        except LookupError as exc:
            log.warning("a webhook's reply cannot be delivered", hook=hook.name, reason=str(exc))
            return None

    def _report(self, hook: Hook, refusal: Refused) -> None:
        hook.refused += 1
        now = time.monotonic()
        if now - hook._reported_at >= REPORT_EVERY_S:
            hook._reported_at = now
            log.warning(
                "webhook delivery refused",
                hook=hook.name,
                status=refusal.status,
                reason=refusal.reason,
                refused=hook.refused,
            )


async def _read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading the rest."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body is larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
