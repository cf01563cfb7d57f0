"""Process helpers shared by the service managers, and the session: a home's handle on its processes.

Every background process a home starts (the Postgres server, the Ray head, the
``dev`` supervisor's Dagster processes) is started as the leader of a new
session. Its descendants stay in that session whatever they rename themselves
to (``ray::DashboardAgent``) and whoever adopts them (ppid 1 once ``ray start``
has exited): Ray's processes never call ``setsid``. Postgres's children do,
but stay the postmaster's children (and exit when it dies), so the leader's
descendants count too. The session id, recorded with the leader's start time,
finds every one of them without matching command lines, and ``end`` can
verify that none is left.

Why not a cgroup: creating one needs root (or a delegated cgroup v2 subtree);
a session works for every user, and no process of ours leaves it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from rl_assets.domain.waiting import Waiting

POLL_S = 0.1


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing): one starter of a service at a time.

    Two commands starting on one home at once would otherwise both start its Postgres (racing in
    ``initdb``) or both start a daemon (two drivers). The kernel drops the lock with its holder.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat``, field 22).

    Not ``psutil.Process.create_time()``: that adds the boot time the kernel derives from the wall
    clock, so a clock step (NTP, a VM's resync; seen here: 10 s) moves every process's start time, and
    a service recorded before the step is no longer recognized as ours, nor ended by ``stop``.
    Raises ``psutil.NoSuchProcess`` when there is no such process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses of its own.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def process_identity(pid: int) -> str:
    """``pid@start-ticks``: names a process uniquely, even after its pid is reused."""
    return f"{pid}@{start_ticks(pid)}"


def identity_alive(identity: str) -> bool:
    """True while the process named by :func:`process_identity` runs."""
    pid, _, started = identity.partition("@")
    if not pid_alive(int(pid)):
        return False
    try:
        return not started or str(start_ticks(int(pid))) == started
    except psutil.Error:
        return False


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


@dataclass(frozen=True)
class Session:
    """One session of processes, named by its id and its leader's start (:func:`start_ticks`).

    The kernel keeps a session id allocated while any member lives, so the id
    cannot name another session while ours has members. Once it is empty the
    number may be reused by an unrelated leader; that leader has another start
    time, and the session is then reported empty rather than someone else's.
    """

    sid: int
    leader_started: int
    """The leader's :func:`start_ticks`."""

    @classmethod
    def led_by(cls, pid: int) -> Session:
        """The session whose leader is ``pid`` (started with ``start_new_session=True``)."""
        return cls(sid=os.getsid(pid), leader_started=start_ticks(pid))

    @classmethod
    def load(cls, path: Path) -> Session | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    def _leader(self) -> psutil.Process | None:
        """The live leader, if it is still ours (same start time); None once it exited."""
        try:
            if start_ticks(self.sid) != self.leader_started:
                return None
            return psutil.Process(self.sid)
        except psutil.Error:
            return None

    def running_leader(self) -> psutil.Process | None:
        """The leader while it is still ours and running (not a zombie): a service's main process."""
        leader = self._leader()
        try:
            return leader if leader is not None and leader.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None

    def _reused(self) -> bool:
        return self._leader() is None and pid_alive(self.sid)

    def members(self) -> list[psutil.Process]:
        """Live (non-zombie) processes of the session and the leader's descendants, this process excluded.

        Descendants count because Postgres's children call ``setsid`` themselves:
        they leave the postmaster's session but stay its children, and they exit
        when it dies.
        """
        if self._reused():
            return []
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            if _sid(proc.pid) == self.sid:
                found[proc.pid] = proc
        leader = self._leader()
        if leader is not None:
            try:
                found.update((child.pid, child) for child in leader.children(recursive=True))
            except psutil.Error:
                pass
        return [p for pid, p in found.items() if pid != os.getpid() and pid_alive(pid)]

    def listening_ports(self) -> set[tuple[str, int]]:
        """``(address, port)`` of every TCP listener of the session's processes."""
        found = set()
        for proc in self.members():
            try:
                for conn in proc.net_connections("inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        found.add((conn.laddr.ip, conn.laddr.port))
            except psutil.Error:
                continue
        return found

    def end(self, timeout: float = 15.0, also: Iterable[psutil.Process] = ()) -> list[int]:
        """SIGTERM every member, SIGKILL what outlives ``timeout``, and verify none is left.

        The members are listed first, while the leader's descendants can still
        be found through it, and ``also`` adds those listed earlier: a child
        that left the session (Dagster's code servers start in sessions of
        their own) is ended even once its parent is gone. Members started while ending (a raylet restarting a worker)
        are caught by the passes that follow. Returns the pids ended.
        """
        known = {p.pid: p for p in [*also, *self.members()]}
        ended: set[int] = set()
        terminate = Waiting(timeout_s=timeout).deadline()  # then SIGKILL
        kill = Waiting(timeout_s=2 * timeout).deadline()  # then give up: a process that outlives SIGKILL
        while members := self._alive({**known, **{p.pid: p for p in self.members()}}):
            force = terminate.expired()
            for proc in members:
                try:
                    proc.kill() if force else proc.terminate()
                except psutil.Error:
                    pass
                ended.add(proc.pid)
            psutil.wait_procs(members, timeout=1.0)
            if kill.expired():
                raise RuntimeError(f"session {self.sid}: still alive after SIGKILL: {[p.pid for p in members]}")
        return sorted(ended)

    @staticmethod
    def _alive(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
        """The processes still running (the same processes: psutil checks their start time)."""
        alive = []
        for proc in procs.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive


_PROC_NET = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as /proc/net/tcp writes it


def listening_sockets(ports: Iterable[int]) -> set[tuple[int, int]]:
    """``(port, socket inode)`` of every TCP listener on one of ``ports``, read from the kernel's tables.

    A socket's inode is its identity: once a service has stopped, another program on the machine may listen
    on the port it freed (another home's Ray worker, say), and that is a new socket, not one of ours held
    open. So a stop waits for the sockets it saw to close, not for the ports to be unused.
    """
    wanted = set(ports)
    found = set()
    for table in _PROC_NET:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:  # no IPv6 on this machine
            continue
        for row in rows:
            fields = row.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == _LISTEN and port in wanted:
                found.add((port, int(fields[9])))
    return found


def wait_sockets_closed(sockets: set[tuple[int, int]], timeout: float = 10.0) -> None:
    """Raise unless every socket of ``sockets`` (from :func:`listening_sockets`) is closed within ``timeout``."""
    ports = {port for port, _ in sockets}
    deadline = Waiting(timeout_s=timeout, interval_s=POLL_S).deadline()
    while held := sorted(port for port, inode in listening_sockets(ports) if (port, inode) in sockets):
        if deadline.expired():
            raise RuntimeError(f"ports still held after stopping: {held}")
        deadline.sleep()
