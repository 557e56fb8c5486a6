"""A node in a network namespace of its own, reached from the host over a link a test can slow, thin or cut: each
packet held a delay, a share of packets lost, or none let through (a partition).

The link is a pair of TUN devices, one in the host's namespace and one in the node's, and a thread per direction
of this process that forwards each packet after its delay or drops it. This is what `tc netem` does in the kernel;
kernels built without `sch_netem` (this suite's Firecracker guest: "Specified qdisc kind is unknown") have TUN
everywhere, and a link in user space behaves the same on all of them. Needs root (`ip netns`, /dev/net/tun).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import random
import re
import select
import struct
import subprocess
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
SUBNETS = ipaddress.ip_network("10.241.0.0/16")  # a /30 of it per link, one not yet on any interface
POLL_S = 0.05  # how soon a forwarding thread sees the link closed


@dataclass(frozen=True)
class Shape:
    """What the link does to each packet, each way: `delay_s` held before it goes on, `loss` the share dropped
    (1.0: none through, a partition)."""

    delay_s: float = 0.0
    loss: float = 0.0


class NodeNetwork:
    """A network namespace `name` whose only way out is a link to the host: the host is `host_ip` on it, the node
    `node_ip`. `argv` runs a command inside; `shape`, `partition` and `heal` change the link at once."""

    def __init__(self, name: str, host_ip: str, node_ip: str, seed: int) -> None:
        self.name, self.host_ip, self.node_ip = name, host_ip, node_ip
        self._shape = Shape()
        self._random = random.Random(seed)  # the same packets lost for the same traffic
        self._closed = threading.Event()

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` run inside the namespace (`ip netns exec` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.name, *command]

    def shape(self, *, delay_s: float = 0.0, loss: float = 0.0) -> None:
        """From now on each packet, each way, is held `delay_s` and dropped with probability `loss`."""
        if delay_s < 0 or not 0.0 <= loss <= 1.0:
            raise ValueError(f"delay_s must be >= 0 and loss within 0..1, got {delay_s}, {loss}")
        self._shape = Shape(delay_s, loss)

    def partition(self) -> None:
        """Nothing through either way: connections to the node hang until their own timeout, as on a cut link."""
        self.shape(loss=1.0)

    def heal(self) -> None:
        self.shape()

    def forward(self, source: int, target: int) -> None:
        """Move packets from `source` to `target` until closed, each after the delay the link has when it arrives
        (one delay for all: the order is kept)."""
        due: deque[tuple[float, bytes]] = deque()
        while not self._closed.is_set():
            wait_s = POLL_S if not due else min(POLL_S, max(0.0, due[0][0] - time.monotonic()))
            if select.select([source], [], [], wait_s)[0]:
                try:
                    packet = os.read(source, 65535)
                except OSError:  # the device went away: the link is being closed
                    return
                shape = self._shape
                if self._random.random() >= shape.loss:
                    due.append((time.monotonic() + shape.delay_s, packet))
            while due and due[0][0] <= time.monotonic():
                try:
                    os.write(target, due.popleft()[1])
                except OSError:  # the other end is down: the packet is lost, as on a wire
                    pass

    def close(self) -> None:
        self._closed.set()


def _tun(name: str) -> int:
    """A TUN device `name` in this process's namespace, open: it exists while the descriptor does."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _free_subnet(start: int) -> ipaddress.IPv4Network:
    """A /30 of `SUBNETS` no interface uses, from the `start`-th on (a pid keeps parallel runs apart)."""
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], check=True, capture_output=True, text=True).stdout
    used = {ipaddress.ip_address(a) for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", shown)}
    subnets = list(SUBNETS.subnets(new_prefix=30))
    for i in range(len(subnets)):
        subnet = subnets[(start + i) % len(subnets)]
        if not used & set(subnet):
            return subnet
    raise RuntimeError(f"no free /30 left in {SUBNETS}")


def _remove_stale() -> None:
    """Namespaces of a run killed before its clean-up (no process of its pid left), so their addresses come free."""
    listed = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True).stdout
    for name, pid in re.findall(r"^(pt(\d+)n\d+)\b", listed, re.MULTILINE):
        if not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@contextmanager
def node_network(index: int) -> Iterator[NodeNetwork]:
    """Namespace `pt<pid>n<index>` and its link to the host, clear; the link, its devices and the namespace are
    gone when the block ends, however it ends (stop what runs inside first: a process keeps the namespace)."""
    _remove_stale()
    pid = os.getpid()
    name, host_dev, node_dev = f"pt{pid}n{index}", f"pt{pid}h{index}", f"pt{pid}a{index}"
    _ip("netns", "add", name)
    fds: list[int] = []
    threads: list[threading.Thread] = []
    network: NodeNetwork | None = None
    try:
        fds += [_tun(host_dev), _tun(node_dev)]
        host_ip, node_ip = (str(a) for a in list(_free_subnet(pid * 8 + index).hosts()))
        network = NodeNetwork(name, host_ip, node_ip, seed=index)
        _ip("link", "set", node_dev, "netns", name)
        _ip("addr", "add", host_ip, "peer", node_ip, "dev", host_dev)
        _ip("link", "set", host_dev, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "addr", "add", node_ip, "peer", host_ip, "dev", node_dev)
        _ip("-n", name, "link", "set", node_dev, "up")
        threads = [threading.Thread(target=network.forward, args=pair, name=f"{name}-link", daemon=True)
                   for pair in ((fds[0], fds[1]), (fds[1], fds[0]))]
        for thread in threads:
            thread.start()
        yield network
    finally:
        if network is not None:
            network.close()
        for thread in threads:
            thread.join(5)
        for fd in fds:
            os.close(fd)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
