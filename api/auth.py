"""Bearer-token check for the mutating endpoints, and where the token comes from."""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Callable

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

TOKEN_ENV = "PIPETUNE_API_TOKEN"

_bearer = HTTPBearer(auto_error=False, description="the API token (PIPETUNE_API_TOKEN or --token-file)")


def load_token(token_file: Path | None = None) -> str | None:
    """The token from `token_file` when given, else from $PIPETUNE_API_TOKEN; None when neither has one."""
    text = token_file.read_text() if token_file else os.environ.get(TOKEN_ENV, "")
    return text.strip() or None


def bearer_guard(token: str) -> Callable[..., None]:
    """A dependency that lets a request through only with `Authorization: Bearer <token>`."""
    if not token:
        raise ValueError("the API needs a non-empty token")
    expected = token.encode()

    def require(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        # Constant time, so response timing does not reveal how much of a guess was right.
        if not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise HTTPException(403, "wrong token")

    return require
