"""The one off-loopback rule (`models.listening`) the agent and the REST API share."""

from pathlib import Path

import pytest

from models.listening import ListenFlags, decide_listening


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_is_served_as_plain_http(host):
    assert decide_listening(host, None, None, False).action == "serve"


@pytest.mark.parametrize("host", ["127.0.1.1", "0.0.0.0", "10.0.0.5", "node1.example"])
def test_off_loopback_needs_tls_or_the_insecure_flag(host):
    refused = decide_listening(host, None, None, False)
    assert refused.action == "refuse" and "--tls-cert" in refused.message and "--insecure-http" in refused.message
    assert decide_listening(host, None, None, True).action == "warn"
    served = decide_listening(host, Path("c.pem"), Path("k.pem"), False)
    assert (served.action, served.scheme) == ("serve", "https")


def test_half_a_tls_pair_or_tls_with_insecure_is_refused_naming_the_flags():
    flags = ListenFlags("--api-tls-cert", "--api-tls-key", "--api-insecure-http")
    assert "--api-tls-cert and --api-tls-key go together" in decide_listening("x", Path("c"), None, False, flags).message
    assert decide_listening("x", Path("c"), Path("k"), True, flags).action == "refuse"
