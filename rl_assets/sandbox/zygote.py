"""The launching side of the keeper zygote: one per process and interpreter, forking each attempt's keeper
(the rollout's, :mod:`.keeper`, and the task sandbox's, :mod:`.task_keeper`).

Starting the keeper as an interpreter of its own cost about 29 ms of CPU an attempt, a third of a reference
trial's sandbox; ``keeper.py --serve`` (:func:`rl_assets.sandbox.keeper.serve`) has imported the keeper once
and forks it per attempt. This module starts that zygote, hands it an attempt's fds (and a socket for its reply), and
holds the keeper it forked through a pidfd.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import threading
import typing

from rl_assets.sandbox import keeper

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: SIGKILLed when the thread that started it ends, in a process group of its own."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


class Zygote:
    """This process's keeper zygote for one interpreter (``keeper.py --serve``): it forks each attempt's keeper.

    Started on first use from a thread of its own that lives as long as the process, since a process's
    ``PR_SET_PDEATHSIG`` fires when the *thread* that started it ends, and trial threads end. It exits when this
    process's end of its socket closes: when the process dies, however it dies.
    """

    _by_interpreter: dict[tuple[int, str], Zygote] = {}
    _starting = threading.Lock()

    def __init__(self, interpreter: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel = ours
        started: list[subprocess.Popen | BaseException] = []
        ready = threading.Event()

        def start() -> None:
            try:
                started.append(
                    subprocess.Popen(
                        [interpreter, "-I", "-S", keeper.__file__, "--serve", str(theirs.fileno())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        env={},
                        cwd="/",
                        pass_fds=(theirs.fileno(),),
                        preexec_fn=die_with_parent,
                    )
                )
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                started.append(err)
            finally:
                theirs.close()
                ready.set()
            threading.Event().wait()  # this thread's end would kill the zygote

        threading.Thread(target=start, name="rl-assets-keeper-zygote", daemon=True).start()
        ready.wait()
        if isinstance(started[0], BaseException):
            raise RuntimeError(f"the sandbox keeper's zygote did not start: {started[0]}") from started[0]
        self.proc = started[0]

    @classmethod
    def of(cls, interpreter: str) -> Zygote:
        key = (os.getpid(), interpreter)
        with cls._starting:
            zygote = cls._by_interpreter.get(key)
            if zygote is None or zygote.proc.poll() is not None:
                zygote = cls._by_interpreter[key] = cls(interpreter)
            return zygote

    def start_keeper(self, attempt_fds: list[int], kind: bytes = b"keeper") -> ForkedKeeper:
        """A new keeper of ``kind`` with ``attempt_fds`` after a stdin and stdout of pipes made here, which the
        returned keeper holds; ``attempt_fds`` are closed here in any case (the keeper has its own copies)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        theirs = [stdin_r, stdout_w, *attempt_fds]
        try:
            keeper = self._fork_keeper(theirs, kind)
        except BaseException:
            os.close(stdin_w)
            os.close(stdout_r)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        keeper.stdin, keeper.stdout = os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb")
        return keeper

    def _fork_keeper(self, fds: list[int], kind: bytes) -> ForkedKeeper:
        """A new keeper of ``kind`` (``b"keeper"``, the rollout's; ``b"task"``, the task sandbox's) with ``fds`` (its
        stdin, stdout, then the attempt's fds).

        The zygote replies on a socket of this request's own, sent with the fds, so requests from many trial
        threads are in flight at once: with one round trip at a time on the shared channel, 256 threads starting
        together queued for up to four seconds, each holding the turn until it had the interpreter's lock back.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:  # a whole message per send on a SOCK_SEQPACKET socket: threads' sends never interleave
                socket.send_fds(self.channel, [kind], [*fds, theirs.fileno()])
            finally:
                theirs.close()
            reply = ours.recv(256).decode(errors="replace")  # empty once the zygote closed its copy unanswered
        except OSError as err:
            raise RuntimeError(f"the sandbox keeper's zygote is gone: {err}") from err
        finally:
            ours.close()
        if not reply.isdigit():
            raise RuntimeError(f"the sandbox keeper's zygote could not fork a keeper: {reply or 'it exited'}")
        return ForkedKeeper(int(reply))


class ForkedKeeper:
    """A keeper the zygote forked: what the attempt needs of a ``Popen`` (pid, pipes, poll, signal, wait), through a
    pidfd, since the keeper is the zygote's child, not ours (the zygote reaps it; its pid is never mistaken)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)  # before the keeper can exit: it waits for its config, which we send
        self.stdin: typing.BinaryIO | None = None
        self.stdout: typing.BinaryIO | None = None

    def _ended(self, timeout_s: float | None) -> bool:
        waiting = select.poll()  # not select(): a run of hundreds of trials holds fds above FD_SETSIZE
        waiting.register(self.pidfd, select.POLLIN)
        return bool(waiting.poll(None if timeout_s is None else timeout_s * 1000))

    def poll(self) -> int | None:
        return 0 if self._ended(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"keeper {self.pid}", timeout or 0)
        return 0

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, sig)

    def close(self) -> None:
        os.close(self.pidfd)
