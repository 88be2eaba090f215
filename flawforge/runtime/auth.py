"""Bearer-token authentication of every service's HTTP API; tokens come from settings.api_tokens.

A middleware checks the token of every request before any route reads it, so a route a service
adds is protected without doing anything; only routes the app names public are not. A route that
needs the caller's name (the reviewer, say) depends on `caller`.
"""
from __future__ import annotations

import hmac
from typing import Callable

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from flawforge.errors import ConfigError, Unauthorized
from flawforge.settings import Settings

# The caller of a request made while authentication is disabled (FLAWFORGE_AUTH=disabled) without a token.
ANONYMOUS = "anonymous"

BEARER = HTTPBearer(auto_error=False, description="A token from FLAWFORGE_API_TOKENS.")


def parse_api_tokens(spec: str) -> dict[str, str]:
    """`name:token,name:token` -> {token: name}; malformed or repeated entries are a config error."""
    owners: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, token = entry.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not name or not token:
            raise ConfigError(f"FLAWFORGE_API_TOKENS entry {name or entry[:20]!r} is not 'name:token'")
        if token in owners:
            raise ConfigError(f"FLAWFORGE_API_TOKENS gives one token to both {owners[token]!r} and {name!r}")
        owners[token] = name
    return owners


class Authenticator:
    """Who owns a bearer token. Without tokens a service refuses to start unless authentication is disabled."""

    def __init__(self, settings: Settings):
        self.owners = parse_api_tokens(settings.api_tokens)
        self.disabled = settings.auth == "disabled"
        if not self.owners and not self.disabled:
            raise ConfigError("FLAWFORGE_API_TOKENS is empty: set `name:token` pairs, or FLAWFORGE_AUTH=disabled "
                              "to serve without authentication")

    def identify(self, authorization: str | None) -> str:
        """The owner of the `Authorization: Bearer` header's token; Unauthorized for a missing or unknown one (a
        token sent is checked even when authentication is disabled)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            if self.disabled:
                return ANONYMOUS
            raise Unauthorized("missing bearer token")
        sent = token.strip().encode()
        owner = None
        for known, name in self.owners.items():  # every token compared, each in constant time
            if hmac.compare_digest(known.encode(), sent):
                owner = name
        if owner is None:
            raise Unauthorized("unknown bearer token")
        return owner


class BearerAuthMiddleware:
    """Refuses every request without a valid token before anything reads it, except those a public route matches
    (health, readiness, metrics, the API docs, data-free pages); records the caller in the request's state."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, public_routes: Callable[[], list[BaseRoute]],
                 refuse: Callable[[Scope, Unauthorized], Response]):
        self.app = app
        self.authenticator = authenticator
        self.public_routes = public_routes
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or any(
                route.matches(scope)[0] == Match.FULL for route in self.public_routes()):
            await self.app(scope, receive, send)
            return
        try:
            name = self.authenticator.identify(Headers(scope=scope).get("authorization"))
        except Unauthorized as exc:
            if scope["type"] == "websocket":  # refused before it is accepted (policy violation)
                await send({"type": "websocket.close", "code": 1008, "reason": str(exc)})
            else:
                await self.refuse(scope, exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = name
        await self.app(scope, receive, send)


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> str:
    """FastAPI dependency: the name owning the request's bearer token, checked by BearerAuthMiddleware. Routers
    are included with it, so the OpenAPI document shows which routes want a token."""
    return request.state.caller
