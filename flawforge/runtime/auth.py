"""Bearer-token identity for protected endpoints; tokens come from settings.api_tokens."""
from __future__ import annotations

import hmac
from typing import Callable

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from flawforge.errors import ConfigError
from flawforge.settings import Settings


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


def bearer_identity(settings: Settings) -> Callable[..., str]:
    """A FastAPI dependency returning the name that owns the request's bearer token, else 401."""
    owners = parse_api_tokens(settings.api_tokens)
    scheme = HTTPBearer(auto_error=False, description="A token from FLAWFORGE_API_TOKENS.")

    def identity(credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> str:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
        for token, name in owners.items():
            if hmac.compare_digest(token.encode(), credentials.credentials.encode()):
                return name
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown bearer token",
                            headers={"WWW-Authenticate": "Bearer"})

    return identity
