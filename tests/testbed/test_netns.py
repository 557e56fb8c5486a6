"""testbed.netns: a namespace reached over a link that holds each packet, drops a share of them, or all of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from testbed.netns import NodeNetwork, node_network



def _served(network: NodeNetwork) -> subprocess.Popen:
    """An HTTP server inside the namespace, on the node's address, answering."""
    server = subprocess.Popen(network.argv([sys.executable, "-m", "http.server", "--bind", network.node_ip, "8000"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://{network.node_ip}:8000/", timeout=2)
            return server
        except httpx.TransportError:
            assert time.monotonic() < deadline and server.poll() is None, "the server in the namespace did not answer"
            time.sleep(0.1)


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace and TUN devices need root")
def test_a_node_is_reached_held_cut_and_healed_and_leaves_nothing_behind():
    with node_network(0) as network:
        server = _served(network)
        try:
            url = f"http://{network.node_ip}:8000/"
            network.shape(delay_s=0.3)
            started = time.monotonic()
            assert httpx.get(url, timeout=30).status_code == 200
            assert time.monotonic() - started >= 4 * 0.3  # the handshake's round trip, then the request's
            network.partition()
            with pytest.raises(httpx.ConnectTimeout):
                httpx.get(url, timeout=1)
            network.heal()
            assert httpx.get(url, timeout=30).status_code == 200
        finally:
            server.terminate()
            server.wait(10)
        name = network.name
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert name.replace("n0", "h0") not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout


def test_the_link_drops_the_share_of_packets_it_is_told_in_order_and_the_same_ones_again():
    def lost(seed: int) -> list[int]:
        network = NodeNetwork("unused", "10.0.0.1", "10.0.0.2", seed=seed)
        network.shape(loss=0.05)
        sender, source = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        target, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        threads = [threading.Thread(target=network.forward, args=(source.fileno(), target.fileno())),
                   threading.Thread(target=lambda: [sender.send(i.to_bytes(2, "big")) for i in range(1000)])]
        for thread in threads:
            thread.start()
        receiver.settimeout(2)
        arrived = []
        try:
            while len(arrived) < 1000:
                arrived.append(int.from_bytes(receiver.recv(2), "big"))
        except TimeoutError:
            pass
        network.close()
        for thread in threads:
            thread.join(5)
        assert arrived == sorted(arrived)  # in order
        return sorted(set(range(1000)) - set(arrived))

    dropped = lost(seed=1)
    assert 20 <= len(dropped) <= 80 and lost(seed=1) == dropped
