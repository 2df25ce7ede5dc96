"""Security headers on every HTTP response (the dashboard, `/health`, webhooks).

The dashboard's page also names its policy in a `<meta>` tag, but some directives only work as a
header: `frame-ancestors 'none'` (no other site may frame the dashboard and click through it) is
ignored in `<meta>`. `X-Content-Type-Options: nosniff` keeps browsers from running a file as a
type it was not served as, and the referrer policy keeps the gateway's URLs out of other sites'
logs. WebSocket scopes pass through untouched, with the server's own `send` (see
`gateway.uvicorn_socket.ExposeServerSocket`, which must see it).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
)


class SecurityHeaders:
    """ASGI middleware: adds `HEADERS` to each HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
