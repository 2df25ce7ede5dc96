"""`GET /metrics` on the gateway's port: the exposition for a caller that presents, as
`Authorization: Bearer <token>`, the gateway's token (or password) or a named token granting
`operator.read` (`gatewayctl tokens create prometheus --scopes operator.read`: a scraper needs
nothing more); 401 otherwise, 404 when metrics are off or served on a port of their own
(`[metrics] port`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from gateway.auth import AuthConfig

if TYPE_CHECKING:
    from gateway.telemetry.telemetry import Telemetry
    from gateway.tokens import NamedToken

SCRAPE_SCOPE = "operator.read"
"""What a named token must grant to scrape."""


def bearer_accepted(authorization: str | None, auth: AuthConfig) -> bool:
    """Whether an `Authorization` header carries the gateway's token or password (any caller is
    accepted when the gateway has no auth, which only a loopback address allows)."""
    if not auth.enabled:
        return True
    credential = bearer_credential(authorization)
    return credential is not None and auth.accepts(credential)


def bearer_credential(authorization: str | None) -> str | None:
    """The credential of a `Bearer` `Authorization` header, or None."""
    scheme, _, credential = (authorization or "").partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def metrics_endpoint(
    telemetry: Callable[[], Telemetry | None],
    auth: Callable[[], AuthConfig],
    named_token: Callable[[str], Awaitable[NamedToken | None]],
) -> Callable[[Request], Awaitable[Response]]:
    """The handler of `GET /metrics`, reading the running telemetry and auth when called;
    `named_token` looks a presented secret up among the named tokens."""

    async def allowed(request: Request) -> bool:
        authorization = request.headers.get("authorization")
        if bearer_accepted(authorization, auth()):
            return True
        credential = bearer_credential(authorization)
        token = await named_token(credential) if credential is not None else None
        return token is not None and SCRAPE_SCOPE in token.grants

    async def metrics(request: Request) -> Response:
        running = telemetry()
        if running is None or not running.serves_gateway_port:
            return PlainTextResponse("not found\n", status_code=404)
        if not await allowed(request):
            return PlainTextResponse(
                "a token granting operator.read is required (Authorization: Bearer <token>)\n",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        body, content_type = await running.scrape()
        return Response(body, media_type=content_type)

    return metrics
