"""Where a pipetune service may listen: the one rule for the node agent and the REST API.

The default address (127.0.0.1, ::1, localhost) is served as asked. Any other address needs TLS (a certificate and its key) or an explicit
insecure flag, which is served with a warning at every start. The token is required either way
(checked by each service); this only decides about transport. Pure: no sockets, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Exactly the default loopback addresses: another 127/8 address stands for "another host" (tests bind 127.0.1.1
# for that), and a rule with one short list is one nobody has to reason about.
LOCAL_HOSTS = ("127.0.0.1", "::1", "[::1]", "localhost")


@dataclass(frozen=True)
class ListenFlags:
    """The command's flag names, so that a refusal names the flags the user typed."""

    cert: str = "--tls-cert"
    key: str = "--tls-key"
    insecure: str = "--insecure-http"


@dataclass(frozen=True)
class Listening:
    """The decision: `serve`, `warn` (serve, and say `message` at start) or `refuse` (exit 2 with `message`)."""

    action: Literal["serve", "warn", "refuse"]
    message: str = ""
    scheme: Literal["http", "https"] = "http"


def is_loopback(host: str) -> bool:
    """Whether `host` is the default loopback address (127.0.0.1, ::1 or localhost); any other is off loopback."""
    return host.lower() in LOCAL_HOSTS


def decide_listening(host: str, tls_cert: object | None, tls_key: object | None, insecure_http: bool,
                     flags: ListenFlags = ListenFlags()) -> Listening:
    """Serve, serve with a warning, or refuse listening on `host` with these TLS files and insecure flag."""
    if (tls_cert is None) != (tls_key is None):
        return Listening("refuse", f"{flags.cert} and {flags.key} go together: give both or neither")
    if tls_cert is not None:
        if insecure_http:
            return Listening("refuse", f"{flags.insecure} contradicts {flags.cert}/{flags.key}: choose one")
        return Listening("serve", scheme="https")
    if is_loopback(host):
        return Listening("serve")
    if insecure_http:
        return Listening("warn", f"WARNING: serving plain HTTP on {host}, off loopback ({flags.insecure}): "
                                 f"the bearer token and every request cross the network unencrypted")
    return Listening("refuse", f"listening on {host} (off loopback) needs TLS: give {flags.cert} and "
                               f"{flags.key}, or accept plain HTTP with {flags.insecure}")
