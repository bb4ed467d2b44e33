"""A private single-node SLURM for tests: its own munged, slurmctld and slurmd under one directory.

Nothing is shared with a system SLURM or with another test run: the munge key and socket, the
``slurm.conf``, the state, spool, log and pid files all live under ``root``; the controller and
node daemon listen on free ports; the cluster gets its own name and job ids start at a random
number. The node is named after this host, as on a real cluster. Client commands (``sinfo``,
``srun``, ``sbatch``, ``scontrol``, ``scancel``) reach it through ``SLURM_CONF``, which
``LocalSlurm.env()`` sets, so ``scontrol requeue`` run by a job's rank 0 talks to this cluster too.

The node has ``CPUs=2`` (``SlurmdParameters=config_overrides``: the same on any machine), uses
``select/cons_tres``, ``proctrack/linuxproc`` and ``task/none`` (no cgroups needed), and the
cluster allows requeueing (``JobRequeue=1``). The daemons run as the current user, which must be
root (SLURM starts jobs as their owner, and slurmd needs root for that).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from tests.helpers.distributed import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
# Up to here the daemons may take to answer on a loaded 2-core machine.
START_TIMEOUT_S = 60.0


def missing_reason() -> str | None:
    """Why no private SLURM can start here (None: it can)."""
    for program in (*DAEMONS, "mungekey", "sinfo", "srun", "sbatch", "scontrol", "scancel"):
        if shutil.which(program) is None:
            return (
                f"{program} is not installed: a private SLURM needs slurm-wlm and munge "
                "(apt-get install slurm-wlm munge; .ci/run installs them)"
            )
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; run the SLURM tests as root (as CI does)"
    return None


class LocalSlurm:
    """Start with ``start()``, stop with ``stop()``; ``env()`` is the environment for clients."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # The node is named after this host, as on a cluster: jobs derive MASTER_ADDR from the
        # node list, so the name must resolve. Clusters on one host never see each other's nodes.
        self.node = socket.gethostname()
        self.name = f"lockstep{uuid.uuid4().hex[:8]}"
        self.conf = root / "slurm.conf"
        self.log_dir = root / "log"
        self._procs: dict[str, subprocess.Popen] = {}
        self.start_seconds = 0.0

    # ------------------------------------------------------------------------------------------
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The current environment pointed at this cluster (plus ``extra``)."""
        env = dict(os.environ)
        # A job started from inside another SLURM job would otherwise inherit that job's ids.
        for name in [n for n in env if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            del env[name]
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a client command (``sinfo``, ``scontrol`` ...) against this cluster."""
        done = subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def job_state(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields for ``job_id`` (``JobState``, ``Restarts``, ...)."""
        text = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        fields: dict[str, str] = {}
        for item in text.split():
            key, _, value = item.partition("=")
            fields.setdefault(key, value)
        return fields

    def processes(self, **env: str) -> list[int]:
        """Processes started for this cluster (jobs, steps, tasks) whose environment has ``env``.

        Every one carries this cluster's ``SLURM_CONF`` (the pytest process itself does not).
        """
        wanted = {f"SLURM_CONF={self.conf}".encode(), *(f"{k}={v}".encode() for k, v in env.items())}
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = set((entry / "environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            if wanted <= environ:
                pids.append(int(entry.name))
        return pids

    def logs(self) -> str:
        """The daemons' logs, for a failure message."""
        return "".join(
            f"--- {path.name} ---\n{path.read_text(errors='replace')[-4000:]}\n"
            for path in sorted(self.log_dir.glob("*.log"))
        )

    # ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Write the configuration, start the three daemons, wait until the node is idle."""
        started = time.monotonic()
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            # munged refuses group- or world-writable directories on the way to its files.
            os.chmod(self.root / sub, 0o700)
        os.chmod(self.root, 0o700)
        key = self.root / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        self.socket = self.root / "munge" / "munge.socket"
        self._write_conf()
        munge = self.root / "munge"
        self._spawn("munged", [
            "munged", "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={self.log_dir / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ])
        self._wait_for(lambda: self.socket.exists(), "munged to create its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait_for(self._node_idle, f"node {self.node} to be idle in sinfo")
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Cancel every job, stop the daemons (slurmd last kills what is left of the jobs)."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--signal=KILL", f"--nodelist={self.node}", check=False)
            self.run("scancel", f"--nodelist={self.node}", check=False)
        for name in ("slurmctld", "slurmd", "munged"):
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._kill_leftover_steps()

    # ------------------------------------------------------------------------------------------
    def _write_conf(self) -> None:
        host = socket.gethostname()
        state, spool, log = self.root / "state", self.root / "spool", self.log_dir
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: a requeued job waits this long + 1 s before it may start again (120 s by
            # default).
            f"AuthInfo=socket={self.socket},cred_expire=5",
            f"StateSaveLocation={state}",
            f"SlurmdSpoolDir={spool}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={log / 'slurmctld.log'}",
            f"SlurmdLogFile={log / 'slurmd.log'}",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "ReturnToService=2",
            "JobRequeue=1",
            "SlurmdParameters=config_overrides",
            # Fast turnaround: a requeued job waits no time, a finished job's record stays 5 min.
            "KillWait=5",
            "MinJobAge=300",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            # Job ids decide the derived MASTER_PORT (15000 + id % 20000): start them somewhere
            # random so that concurrent test runs on one host do not derive the same port.
            f"FirstJobId={int.from_bytes(os.urandom(2), 'little') % 15000 + 1}",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, name: str, command: list[str]) -> None:
        out = open(self.log_dir / f"{name}.out", "w")
        self._procs[name] = subprocess.Popen(
            command, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _node_idle(self) -> bool:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting:\n{self.logs()}")
        done = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T", check=False, timeout=10)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def _wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {START_TIMEOUT_S:.0f} s waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)

    def _kill_leftover_steps(self) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
