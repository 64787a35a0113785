"""A Ray cluster of several nodes on this machine, started with ``ray start`` (tests and benchmarks).

The head gets the custom resource ``engram_head`` (Serve replicas that ask for it stay there); each
worker node runs ``ray start --block`` in its own process group, so that it can be killed — raylet,
workers and actors — by its own process ids. Run it inside ``loopback-only`` on machines where Ray
must stay on the loopback interface.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive_nodes() -> list[dict]:
    import ray

    return [n for n in ray.nodes() if n["Alive"]]


class LocalCluster:
    def __init__(self, head_cpus: int = 2) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head_cpus = head_cpus
        self.workers: list[subprocess.Popen] = []
        self.env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}

    def start_head(self) -> None:
        subprocess.run([RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                        f"--num-cpus={self.head_cpus}", '--resources={"engram_head": 1000}',
                        "--include-dashboard=false", "--disable-usage-stats"],
                       check=True, env=self.env, capture_output=True)

    def start_worker(self, num_cpus: int = 1) -> subprocess.Popen:
        proc = subprocess.Popen(
            [RAY, "start", f"--address={self.address}", "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
             "--block", "--disable-usage-stats"],
            env=self.env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.workers.append(proc)
        return proc

    @property
    def worker(self) -> subprocess.Popen | None:
        return self.workers[0] if self.workers else None

    def wait_for_nodes(self, n: int, timeout_s: float = 60.0) -> None:
        deadline = time.time() + timeout_s
        while len(alive_nodes()) != n:
            if time.time() > deadline:
                raise TimeoutError(f"{len(alive_nodes())} nodes alive after {timeout_s:.0f} s, expected {n}")
            time.sleep(0.5)

    def kill_worker(self, index: int = 0) -> None:
        """SIGKILL a worker node's whole process group (its raylet, workers and actors)."""
        proc = self.workers[index] if index < len(self.workers) else None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def stop(self) -> None:
        for i in range(len(self.workers)):
            self.kill_worker(i)
        subprocess.run([RAY, "stop", "--force"], env=self.env, capture_output=True)
