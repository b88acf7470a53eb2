"""A throw-away one-node SLURM cluster for the job tests (``tests/slurm/test_jobs.py``).

``ensure_installed()`` installs Debian's ``slurmctld slurmd slurm-client`` when they are
missing (as root, with apt-get) and says why when that cannot be done.  ``Cluster(root)``
writes a ``slurm.conf`` keeping every state, spool, pid and log file under ``root``, with a
unique cluster name and free ports, so it neither needs nor disturbs a SLURM already on the
machine; ``start()`` runs both daemons in the foreground as child processes (so they can be
waited for) and waits until ``sinfo`` shows the node idle; ``shutdown()`` cancels what is
left, runs ``scontrol shutdown`` and waits for the daemons to exit.

Settings: ``AuthType=auth/none``, ``CredType=cred/none`` (no munge),
``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none`` (no cgroups),
``SlurmdParameters=config_overrides`` (the node's CPUs as configured, not as detected), one
node ``NodeAddr=127.0.0.1 CPUs=8``.  There is no accounting database (no slurmdbd), so plain
``sacct`` answers "accounting storage is disabled"; ``JobCompType=jobcomp/filetxt`` keeps a
job-completion log that ``sacct -c`` reads, and ``MinJobAge=3600`` keeps finished jobs in
``scontrol show job`` for the whole session.  Both are checked by :meth:`Cluster.state`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client")
COMMANDS = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel", "sacct")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _which(command: str) -> str | None:
    return shutil.which(command) or shutil.which(command, path="/usr/sbin:/usr/bin:/sbin:/bin")


def missing() -> list[str]:
    return [c for c in COMMANDS if _which(c) is None]


def ensure_installed(timeout: float = 900) -> str | None:
    """None when SLURM's daemons and commands are there (installing them if needed and
    possible), else the reason they are not."""
    if not missing():
        return None
    wanted = " ".join(PACKAGES)
    if os.geteuid() != 0:
        return (f"SLURM is not installed ({', '.join(missing())} missing) and installing it "
                f"needs root: apt-get install {wanted}")
    if shutil.which("apt-get") is None:
        return f"SLURM is not installed and there is no apt-get to install {wanted}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = []
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *PACKAGES]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=env, check=False)
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} did not finish within {timeout:.0f} s"
        log.append(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = "\n".join("".join(log).splitlines()[-15:])
            return f"cannot install SLURM: {' '.join(command)} exited {done.returncode}:\n{tail}"
    if missing():
        return f"installed {wanted} but {', '.join(missing())} are still missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One SLURM controller and one node on this machine, all files under ``root``."""

    def __init__(self, root: Path, cpus: int = 8):
        self.root = Path(root)
        self.name = f"hpcc{os.getpid() % 100000}t{int(time.time()) % 100000}"
        # Job ids that no earlier test cluster on this machine used (see shutdown()).
        self.first_job_id = random.randrange(1_000_000, 60_000_000, 1000)
        self.node = "localhost"
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.logs = self.root / "log"
        self.daemons: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_",
                                                                              "SRUN_", "SALLOC_"))}
        self.env.pop("ENVIRONMENT", None)          # "BATCH" inside a batch job of another SLURM
        self.env["SLURM_CONF"] = str(self.conf)

    def config(self) -> str:
        r = self.root
        return "\n".join([
            f"ClusterName={self.name}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/none",
            "CredType=cred/none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmdParameters=config_overrides",
            f"SlurmUser={_user()}",
            f"SlurmdUser={_user()}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.logs / 'slurmctld.log'}",
            f"SlurmdLogFile={self.logs / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.logs / 'jobcomp.txt'}",
            "MinJobAge=3600",
            f"FirstJobId={self.first_job_id}",
            "KillWait=30",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            ""])

    # -- commands ---------------------------------------------------------------------------
    def command(self, *args: str, timeout: float = 60, check: bool = False,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=self.env, cwd=cwd, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}"
                               f"{done.stderr}\n{self.daemon_logs()}")
        return done

    def sbatch(self, script: Path, *options: str, cwd: Path | None = None) -> str:
        done = self.command("sbatch", "--parsable", *options, str(script), check=True, cwd=cwd)
        return done.stdout.strip().split(";")[0]

    # -- life cycle -------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> None:
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self.config())
        for daemon, args in (("slurmctld", ["-D", "-i", "-f", str(self.conf)]),
                             ("slurmd", ["-D", "-f", str(self.conf), "-N", self.node])):
            with open(self.logs / f"{daemon}.stdout", "w") as out:
                self.daemons[daemon] = subprocess.Popen([_which(daemon), *args], stdout=out,
                                                        stderr=subprocess.STDOUT, env=self.env,
                                                        start_new_session=True)
            if daemon == "slurmctld":
                self._wait_for(lambda: self.command("scontrol", "ping").returncode == 0,
                               timeout, "slurmctld to answer scontrol ping")
        self._wait_for(self.idle, timeout, f"node {self.node} to be idle in sinfo")

    def idle(self) -> bool:
        done = self.command("sinfo", "-h", "-N", "-n", self.node, "-o", "%T")
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def _wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited {process.returncode} while waiting for "
                                       f"{what}\n{self.daemon_logs()}")
            if condition():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                           f"{self.command('sinfo', '-N', '-l').stdout}\n{self.daemon_logs()}")

    def shutdown(self, timeout: float = 30) -> None:
        """Cancel this cluster's jobs, stop both daemons (scontrol shutdown), wait for them;
        only if they outlive ``timeout``, signal the two processes started here."""
        if not self.daemons:
            return
        job_ids = re.findall(r"^JobId=(\d+)", self.command("scontrol", "show", "job", "-o").stdout,
                             re.MULTILINE)
        if self.command("squeue", "-h", "-o", "%i").stdout.strip():
            self.command("scancel", "--full", "--user", _user())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and \
                    self.command("squeue", "-h", "-o", "%i").stdout.strip():
                time.sleep(0.5)
        self.command("scontrol", "shutdown")
        deadline = time.monotonic() + timeout
        for process in self.daemons.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.daemons.clear()
        remove_mpich_segments(job_ids)

    def daemon_logs(self, lines: int = 40) -> str:
        out = []
        for path in sorted(self.logs.glob("*")):
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(out)

    # -- jobs -------------------------------------------------------------------------------
    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o``'s fields."""
        done = self.command("scontrol", "show", "job", "-o", job_id)
        if done.returncode != 0:
            return {}
        return dict(re.findall(r"(\w[\w/:]*)=(\S*)", done.stdout))

    def completion_log_state(self, job_id: str) -> str | None:
        """The state ``sacct -c`` reads from the job-completion log (None when not there)."""
        done = self.command("sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State")
        for line in done.stdout.splitlines():
            fields = line.split("|")
            if fields[0] == job_id:
                return fields[1].split()[0]
        return None

    def accounting_works(self) -> bool:
        return self.command("sacct", "-n", "-X").returncode == 0

    def state(self, job_id: str) -> str:
        """The job's state: sacct's where accounting works, else scontrol's, which must agree
        with the completion log once the job has ended."""
        if self.accounting_works():
            done = self.command("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State")
            return done.stdout.split()[0]
        state = self.job(job_id).get("JobState", "UNKNOWN")
        if state in FINAL_STATES:
            logged = self.completion_log_state(job_id)
            assert logged == state, f"job {job_id}: scontrol says {state}, sacct -c {logged}"
        return state

    def wait(self, job_ids: list[str], timeout: float) -> dict[str, str]:
        """Final state of each job, waiting up to ``timeout`` seconds for all of them."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while True:
            states = {j: self.job(j).get("JobState", "UNKNOWN") for j in job_ids}
            if all(s in FINAL_STATES for s in states.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs not finished after {timeout:.0f} s: {states}\n"
                                   f"{self.command('squeue').stdout}\n{self.daemon_logs()}")
            time.sleep(1)
        # The completion log is written as the job ends; give it a moment.
        for _ in range(20):
            if all(self.completion_log_state(j) for j in job_ids):
                break
            time.sleep(0.5)
        return {j: self.state(j) for j in job_ids}


def _fnv1a(text: str) -> int:
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def remove_mpich_segments(job_ids: list[str], steps: int = 64) -> list[str]:
    """Remove the node shared-memory segments MPICH left in /dev/shm for these jobs' steps.

    MPICH names the segment ``mpich_shm_<FNV-1a of the PMI job id>_<node>``, and under
    ``srun --mpi=pmi2`` the PMI job id is SLURM's ``JOBID.STEPID``.  A rank that is killed
    (scancel, time limit) never unlinks it, and a later step with the same id, as in a new
    SLURM whose numbering starts again, attaches to the stale segment and fails in
    MPI_Init ("Message truncated", "Out of memory" in MPIDI_POSIX_comm_bootstrap).  Hence the
    random FirstJobId, and this clean-up of the segments of the jobs this cluster ran."""
    names = {f"{_fnv1a(f'{job}.{step}'):x}" for job in job_ids for step in range(steps)}
    removed = []
    shm = Path("/dev/shm")
    for path in shm.glob("mpich_*") if shm.is_dir() else []:
        match = re.fullmatch(r"mpich_(?:shm|vci)_([0-9a-f]+)_\d+", path.name)
        if match and match.group(1) in names:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path.name)
    return removed


def _user() -> str:
    import pwd
    return pwd.getpwuid(os.geteuid()).pw_name
