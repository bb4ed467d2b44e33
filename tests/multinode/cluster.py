"""A simulated cluster on one machine: Linux network namespaces joined by veth links.

Node ``i`` is the namespace ``ls<tag>n<i>`` with address ``10.77.0.<i+1>/24``, every node on
one bridge in node 0's namespace (a veth link from each other node), its own host name
``lsnode<i>`` (a UTS namespace per command) and its own ``/etc/hosts`` naming every node
(``ip netns exec`` mounts ``/etc/netns/<ns>/hosts`` over it). The subnet exists only inside the
namespaces. Needs root (``ip netns``, ``unshare``); everything is removed by `Cluster.close`,
also the processes still running in a namespace.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Sequence

SUBNET = "10.77.0"


def unavailable() -> str | None:
    """Why no cluster can be built here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "tests/multinode builds network namespaces: needs root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"tests/multinode needs the {tool!r} command"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


class Cluster:
    """``nodes`` namespaces on one private subnet; `popen` runs a command on a node."""

    def __init__(self, nodes: int = 2) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.names = [f"ls{self.tag}n{i}" for i in range(nodes)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self.hostnames = [f"lsnode{i}" for i in range(nodes)]
        self._procs: list[subprocess.Popen] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for a, h in zip(self.addresses, self.hostnames))
        for name in self.names:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
        # node 0's namespace holds the switch: a bridge with node 0's address, one veth per other node
        bridge = f"b{self.tag}"
        _ip("-n", self.names[0], "link", "add", bridge, "type", "bridge")
        _ip("-n", self.names[0], "addr", "add", f"{self.addresses[0]}/24", "dev", bridge)
        _ip("-n", self.names[0], "link", "set", bridge, "up")
        for i in range(1, len(self.names)):
            a, b = f"v{self.tag}a{i}", f"v{self.tag}b{i}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", self.names[0])
            _ip("link", "set", b, "netns", self.names[i])
            _ip("-n", self.names[0], "link", "set", a, "master", bridge)
            _ip("-n", self.names[0], "link", "set", a, "up")
            _ip("-n", self.names[i], "addr", "add", f"{self.addresses[i]}/24", "dev", b)
            _ip("-n", self.names[i], "link", "set", b, "up")

    def popen(self, node: int, args: Sequence[str], env: dict[str, str], **kw) -> subprocess.Popen:
        """Start ``args`` on ``node`` (its namespace and host name), in a session of its own."""
        command = [
            "ip", "netns", "exec", self.names[node], "unshare", "--uts", "sh", "-c",
            f'hostname {self.hostnames[node]} && exec "$@"', "sh", *args,
        ]
        proc = subprocess.Popen(command, env=env, start_new_session=True, **kw)
        self._procs.append(proc)
        return proc

    def pids(self, node: int) -> list[int]:
        """Every process running in ``node``'s namespace."""
        done = _ip("netns", "pids", self.names[node], check=False)
        return [int(p) for p in done.stdout.split() if p.isdigit()]

    def kill_node(self, node: int) -> None:
        """SIGKILL every process on ``node`` (its power cut)."""
        for _ in range(5):  # a process may start another while we kill
            pids = self.pids(node)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def partition(self, node: int) -> None:
        """Cut ``node``'s link to the switch: its processes run on, nothing reaches them (no reset)."""
        _ip("-n", self.names[0], "link", "set", f"v{self.tag}a{node}", "down")

    def close(self) -> None:
        """Kill what still runs on the nodes; delete the namespaces (and their links) and files."""
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for node, name in enumerate(self.names):
            if name in _ip("netns", "list", check=False).stdout:
                self.kill_node(node)
                _ip("netns", "del", name, check=False)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def finish(procs: Sequence[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    """Each process's (exit code, output: stdout, then stderr if piped apart); one still running
    after ``timeout`` s is killed."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=10)
            out = f"[killed after {timeout} s]\n{out}"
        results.append((proc.returncode, (out or "") + (err or "")))
    return results
