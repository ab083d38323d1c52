"""Several "hosts" on one machine: Linux network namespaces joined by a bridge (root only).

Each host is a network namespace with its own loopback and one veth interface whose other end
sits on a bridge in the root namespace; the bridge holds the subnet's ``.254`` address, so
the root namespace (where the test's clients run) reaches every host too. Processes start
in a host with :meth:`Hosts.cmd` (``ip netns exec NS ...``); the filesystem is shared, the
network is not. :meth:`Hosts.down` pulls a host's cable (its link goes down).

Names carry this process's id, so tests of several people on one machine do not collide;
everything is removed by :meth:`Hosts.close` (a context manager), pass or fail, and a left
over namespace of a dead test process is removed by the next one. :meth:`Hosts.unroute` cuts the
route between two hosts, :meth:`Hosts.throttle` limits what one sends. :func:`unavailable` says
why the machine cannot do it (not root, no ``ip``, namespaces refused) so tests can skip
with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess

PREFIX = "gps"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"{PREFIX}probe{os.getpid()}"
    p = _ip("netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"`ip netns add` failed here: {p.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _sweep() -> None:
    """Remove namespaces and bridges of this helper whose process is gone."""
    names = _ip("netns", "list", check=False).stdout.split()
    links = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    bridges = [line.split(":")[1].strip() for line in links.splitlines() if ":" in line]
    for name in names + bridges:
        if name.startswith(PREFIX) and name[len(PREFIX) :].split("-")[0].isdigit():
            pid = int(name[len(PREFIX) :].split("-")[0])
            if not os.path.exists(f"/proc/{pid}"):
                kind = ["netns", "del", name] if name in names else ["link", "del", name]
                _ip(*kind, check=False)


class Hosts:
    """``Hosts(["sched", "w1", "w2"])``: one namespace per name, addresses ``10.213.N.1``,
    ``.2``, ... in that order (N from this process's id); :attr:`ip` maps name to address."""

    def __init__(self, names: list[str], subnet: str | None = None):
        _sweep()
        self.tag = f"{PREFIX}{os.getpid()}"
        self.subnet = subnet or f"10.213.{os.getpid() % 250}"
        self.bridge = f"{self.tag}-br"[:15]
        self.ns: dict[str, str] = {}
        self.ip: dict[str, str] = {}
        self._veth: dict[str, tuple[str, str]] = {}
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            # bridged frames skip iptables (br_netfilter and a FORWARD DROP policy would drop them)
            _ip("link", "set", self.bridge, "type", "bridge", "nf_call_iptables", "0", check=False)
            _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(names, start=1):
                self._add(name, i)
        except BaseException:
            self.close()
            raise

    def _add(self, name: str, i: int) -> None:
        ns = f"{self.tag}-{name}"
        host_end, ns_end = f"{self.tag}h{i}"[:15], f"{self.tag}n{i}"[:15]
        _ip("netns", "add", ns)
        self.ns[name] = ns
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        self._veth[name] = (host_end, ns_end)
        _ip("link", "set", ns_end, "netns", ns)
        _ip("link", "set", host_end, "master", self.bridge)
        _ip("link", "set", host_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.subnet}.{i}/24", "dev", ns_end)
        _ip("-n", ns, "link", "set", ns_end, "up")
        self.ip[name] = f"{self.subnet}.{i}"

    def cmd(self, name: str, *argv: str) -> list[str]:
        """``argv`` to run inside host ``name`` (the environment passes through)."""
        return ["ip", "netns", "exec", self.ns[name], *argv]

    def down(self, name: str) -> None:
        """Pull host ``name``'s cable: its veth goes down on both ends."""
        host_end, ns_end = self._veth[name]
        _ip("link", "set", host_end, "down", check=False)
        _ip("-n", self.ns[name], "link", "set", ns_end, "down", check=False)

    def unroute(self, a: str, b: str) -> None:
        """Hosts ``a`` and ``b`` lose their routes to each other (each gets "No route to host"
        from the other's address); both still reach every other host and the root namespace."""
        _ip("-n", self.ns[a], "route", "add", "unreachable", f"{self.ip[b]}/32")
        _ip("-n", self.ns[b], "route", "add", "unreachable", f"{self.ip[a]}/32")

    def throttle(self, name: str, rate: str) -> None:
        """Host ``name`` sends at most ``rate`` (tc's token bucket filter on its interface,
        e.g. ``"8mbit"``); what it receives is not limited."""
        _, ns_end = self._veth[name]
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns[name],
                "tc",
                "qdisc",
                "add",
                "dev",
                ns_end,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "32kb",
                "latency",
                "5s",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def pids(self, name: str) -> list[int]:
        """Processes running in host ``name``."""
        out = _ip("netns", "pids", self.ns[name], check=False).stdout.split()
        return [int(p) for p in out if p.isdigit()]

    def close(self) -> None:
        import signal

        for name in list(self.ns):
            for pid in self.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host_end, _ in self._veth.values():
            _ip("link", "del", host_end, check=False)  # and its peer in the namespace
        for ns in self.ns.values():
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
        self.ns.clear()

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
