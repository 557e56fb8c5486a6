"""The HTTP client the CLI commands use to talk to a running API."""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8470"
URL_ENV = "PIPETUNE_API_URL"


class ApiError(RuntimeError):
    """The API refused a request or could not be reached; the message says why, field by field."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


def _explain(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if isinstance(detail, list):  # 422: one line per field
        return "\n".join(f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in detail)
    return str(detail)


class ApiClient:
    """Calls the pipetune API at `url`, sending the bearer token when one is given; a pool's routes when `pool`
    is named, else the only (or `default`) pool's."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None, pool: str | None = None) -> None:
        self.url = url or os.environ.get(URL_ENV, DEFAULT_URL)
        self._prefix = f"/pools/{pool}" if pool else ""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, self._prefix + path, **kwargs)

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(None, f"cannot reach the pipetune API at {self.url}: {exc}") from None
        if response.status_code in (401, 403):
            raise ApiError(response.status_code, f"{_explain(response)} (set PIPETUNE_API_TOKEN or --token-file)")
        if response.status_code >= 400:
            raise ApiError(response.status_code, _explain(response))
        return response.json()

    def status(self) -> dict:
        return self._call("GET", "/status")

    def pools(self) -> list[dict]:
        """Every pool of the daemon with its nodes and status (whichever pool this client addresses)."""
        return self._request("GET", "/pools")

    def policy(self) -> dict:
        return self._call("GET", "/policy")

    def put_policy(self, policy: dict) -> dict:
        return self._call("PUT", "/policy", json=policy)

    def patch_policy(self, changes: dict) -> dict:
        return self._call("PATCH", "/policy", json=changes)

    def add_override(self, params: dict, ttl_s: float, reason: str, override_bounds: bool = False) -> dict:
        return self._call("POST", "/overrides", json={"params": params, "ttl_s": ttl_s, "reason": reason,
                                                      "override_bounds": override_bounds})

    def overrides(self) -> list[dict]:
        return self._call("GET", "/overrides")

    def delete_override(self, override_id: str) -> dict:
        return self._call("DELETE", f"/overrides/{override_id}")

    def pause(self) -> dict:
        return self._call("POST", "/pause")

    def resume(self) -> dict:
        return self._call("POST", "/resume")

    def decisions(self, limit: int = 20, before: int | None = None) -> dict:
        params = {"limit": limit} | ({"before": before} if before is not None else {})
        return self._call("GET", "/decisions", params=params)
