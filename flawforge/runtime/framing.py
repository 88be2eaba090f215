"""No page of a service may be shown inside another site's frame: a framed review page could have its one-key
decisions clicked by a page the reviewer never meant to act on."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The old header and its Content-Security-Policy successor: browsers honour one or the other.
FRAMING_HEADERS = ((b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"))


class NoFraming:
    """Adds FRAMING_HEADERS to every HTTP answer (errors and refusals included)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *(h for h in FRAMING_HEADERS if h[0] not in names)]}
            await send(message)

        await self.app(scope, receive, send_framed)
