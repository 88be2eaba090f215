"""Bearer-token authentication of every service's HTTP API; tokens come from settings.api_tokens.

A middleware checks the token of every request before any route reads it, so a route a service
adds is protected without doing anything; only routes the app names public are not. Each token has
a role; each router declares the roles it serves once (`allow`), and one that declares none serves
PLATFORM_ROLES. A route that needs the caller's name (the reviewer, say) depends on `caller`.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Callable

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from flawforge.errors import ConfigError, Forbidden, Unauthorized
from flawforge.settings import Settings

OPERATOR, SERVICE, REVIEWER = "operator", "service", "reviewer"
ROLES = (OPERATOR, SERVICE, REVIEWER)
# An entry without a role (`name:token`) could call every route before tokens had roles; it still can.
DEFAULT_ROLE = OPERATOR
# The roles that run the platform: a router that declares no roles serves them, and they see the detailed
# /metrics and /readyz. Reviewers reach only routers that name them.
PLATFORM_ROLES = (OPERATOR, SERVICE)

# The caller of a request made while authentication is disabled (FLAWFORGE_AUTH=disabled) without a token.
ANONYMOUS = "anonymous"

BEARER = HTTPBearer(auto_error=False, description="A token from FLAWFORGE_API_TOKENS.")


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the name of its token's entry and that entry's role."""

    name: str
    role: str


def parse_api_tokens(spec: str) -> dict[str, Caller]:
    """`name:token[:role],...` -> {token: Caller}; malformed or repeated entries and unknown roles are a config
    error (whose message never quotes a token)."""
    owners: dict[str, Caller] = {}
    for number, entry in enumerate(filter(None, (part.strip() for part in spec.split(","))), start=1):
        name, *rest = (part.strip() for part in entry.split(":"))
        # Named by its name, or its place when it has none (a lone word may be a token: never quoted).
        what = f"FLAWFORGE_API_TOKENS entry {name!r}" if name and rest else f"FLAWFORGE_API_TOKENS entry {number}"
        if len(rest) not in (1, 2) or not name or not rest[0]:
            raise ConfigError(f"{what} is not 'name:token' or 'name:token:role'")
        token, role = rest[0], rest[1] if len(rest) == 2 else DEFAULT_ROLE
        if role not in ROLES:
            raise ConfigError(f"{what} has the unknown role {role!r} (roles: {', '.join(ROLES)})")
        if token in owners:
            raise ConfigError(f"FLAWFORGE_API_TOKENS gives one token to both {owners[token].name!r} and {name!r}")
        owners[token] = Caller(name, role)
    return owners


class Authenticator:
    """Who owns a bearer token. Without tokens a service refuses to start unless authentication is disabled."""

    def __init__(self, settings: Settings):
        self.owners = parse_api_tokens(settings.api_tokens)
        self.disabled = settings.auth == "disabled"
        if not self.owners and not self.disabled:
            raise ConfigError("FLAWFORGE_API_TOKENS is empty: set `name:token` pairs, or FLAWFORGE_AUTH=disabled "
                              "to serve without authentication")

    def identify(self, authorization: str | None) -> Caller:
        """The owner of the `Authorization: Bearer` header's token; Unauthorized for a missing or unknown one (a
        token sent is checked even when authentication is disabled; without one, the caller is an operator)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            if self.disabled:
                return Caller(ANONYMOUS, OPERATOR)
            raise Unauthorized("missing bearer token")
        sent = token.strip().encode()
        owner = None
        for known, who in self.owners.items():  # every token compared, each in constant time
            if hmac.compare_digest(known.encode(), sent):
                owner = who
        if owner is None:
            raise Unauthorized("unknown bearer token")
        return owner


class BearerAuthMiddleware:
    """Refuses every request without a valid token before anything reads it, except those a public route matches
    (health, readiness, metrics, the API docs, data-free pages); records the caller in the request's state. A
    public route's token, when one is sent, is checked too: its caller may see more there (the detailed
    /metrics)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, public_routes: Callable[[], list[BaseRoute]],
                 refuse: Callable[[Scope, Unauthorized], Response]):
        self.app = app
        self.authenticator = authenticator
        self.public_routes = public_routes
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        authorization = Headers(scope=scope).get("authorization")
        public = any(route.matches(scope)[0] == Match.FULL for route in self.public_routes())
        if public and not authorization and not self.authenticator.disabled:
            await self.app(scope, receive, send)
            return
        try:
            who = self.authenticator.identify(authorization)
        except Unauthorized as exc:
            if scope["type"] == "websocket":  # refused before it is accepted (policy violation)
                await send({"type": "websocket.close", "code": 1008, "reason": str(exc)})
            else:
                await self.refuse(scope, exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = who
        await self.app(scope, receive, send)


class RolesAllowed:
    """The FastAPI dependency a router declares its roles with: refuses (403) a caller of another role."""

    def __init__(self, roles: tuple[str, ...]):
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown roles {sorted(unknown)}")
        self.roles = roles

    def __call__(self, request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> None:
        who = identity(request)
        if who.role not in self.roles:
            raise Forbidden(f"a {who.role} token may not call {request.method} {request.url.path[:120]} "
                            f"(it is for {' and '.join(self.roles)} tokens)")


def allow(*roles: str):
    """A router's declaration of the roles it serves: `APIRouter(..., dependencies=[allow(OPERATOR, REVIEWER)])`."""
    return Depends(RolesAllowed(roles))


def declares_roles(router: APIRouter) -> bool:
    return any(isinstance(dependency.dependency, RolesAllowed) for dependency in router.dependencies)


def identity(request: Request) -> Caller:
    """The caller BearerAuthMiddleware recorded for the request."""
    return request.state.caller


def platform_caller(request: Request) -> bool:
    """Whether a valid operator or service token came with the request (always true on an authenticated route
    a router without declared roles serves; on a public route, only when a token was sent)."""
    who = getattr(request.state, "caller", None)
    return who is not None and who.role in PLATFORM_ROLES


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> str:
    """FastAPI dependency: the name owning the request's bearer token, checked by BearerAuthMiddleware. Routers
    are included with it, so the OpenAPI document shows which routes want a token."""
    return identity(request).name
