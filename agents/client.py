"""A client of the agent's HTTP service, for the controller's `LivePipeline`, the testbed and tests.

Every change answer becomes a `ChangeResult` (applied, unchanged, rejected, rolled_back); what is
not an answer about the change (bad token, unknown component, a version conflict, a refused value)
raises `AgentError` carrying the status and the agent's detail.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Mapping

import httpx

from agents.component import ChangeResult
from models.space import Value


class AgentError(RuntimeError):
    """The agent refused a request; `status` and `detail` say why (422 names the field and range)."""

    def __init__(self, status: int, detail: object) -> None:
        message = detail.get("message", detail) if isinstance(detail, dict) else detail
        super().__init__(f"agent answered {status}: {message}")
        self.status = status
        self.detail = detail


class AgentClient:
    """One agent, by base URL and bearer token; https is verified against `ca_file` (else the system CAs)."""

    def __init__(self, base_url: str, token: str, ca_file: Path | str | None = None, *, timeout_s: float = 120.0,
                 transport: httpx.BaseTransport | None = None, node: str | None = None) -> None:
        self.url = base_url
        self.node = node or base_url
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        # A change waits for the component's health: the timeout must outlast the agent's health_timeout_s.
        headers = {"Authorization": f"Bearer {token}"} if token else {}  # none at all: the agent answers 401
        self._http = httpx.Client(base_url=base_url, headers=headers,
                                  timeout=timeout_s, transport=transport, verify=verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, response: httpx.Response, ok: tuple[int, ...] = (200,)) -> object:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code in (401, 403) and response.status_code not in ok:
            # Not a fault of the request: the controller holds a missing or wrong token for this node.
            raise AgentError(response.status_code, f"the agent of {self.node} ({self.url}) refused the token "
                                                   f"(missing or wrong; check the node's token file): {body}")
        if response.status_code not in ok:
            raise AgentError(response.status_code, body)
        return body

    def clock(self) -> float:
        """The node's clock (epoch seconds) as its agent read it."""
        return float(self._json(self._http.get("/clock"))["time_s"])  # type: ignore[index]

    def components(self) -> list[dict]:
        """Every component's version, params, health and runtime."""
        return self._json(self._http.get("/components"))  # type: ignore[return-value]

    def component(self, name: str) -> dict:
        return self._json(self._http.get(f"/components/{name}"))  # type: ignore[return-value]

    def put_config(self, name: str, version: int, params: Mapping[str, Value]) -> ChangeResult:
        """Ask for `params` as `version`; a retried call with the same version and values is answered the same."""
        response = self._http.put(f"/components/{name}/config", json={"version": version, "params": dict(params)})
        body = self._json(response, ok=(200, 422, 502))  # 401/403 stay AgentErrors naming the node
        if isinstance(body, dict) and "status" in body:  # a change outcome, even when it failed
            return ChangeResult(**body)
        raise AgentError(response.status_code, body)

    def next_version(self, name: str) -> int:
        """The lowest version number the agent will take as a new change of `name`."""
        return int(self.component(name)["highest_version"]) + 1

    def rollback(self, name: str) -> ChangeResult:
        return ChangeResult(**self._json(self._http.post(f"/components/{name}/rollback")))  # type: ignore[arg-type]

    def audit(self, name: str) -> list[dict]:
        return self._json(self._http.get(f"/components/{name}/audit"))  # type: ignore[return-value]
