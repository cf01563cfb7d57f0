"""``rl-assets dev``: the Dagster UI of a home, for its owner only, under a supervisor that ends it.

The UI is Dagster's webserver app on the home's workspace, served by
:mod:`rl_assets.home.services.ui_webserver` behind the home's UI token
(:mod:`rl_assets.home.services.ui_auth`): every HTTP request and websocket upgrade
without the token (or the cookie the login URL sets) is refused before Dagster
sees it, so another local user cannot launch runs with the owner's keys. The
login URL is printed on stderr; the token file stays, so a bookmark keeps working.

The daemon that drives experiments and launches the UI's runs is the home's own
(:mod:`rl_assets.home.services.daemon`), not a second one: two daemons would each
run the driver sensor. The webserver alone does not stop its code servers on
SIGTERM, so the CLI does not exec it: it runs it as the leader of a new
session (recorded in ``services/dev.session``) and waits. On SIGTERM, SIGINT
(Ctrl-C, which the terminal no longer delivers to the UI's own session) or
SIGHUP it asks the webserver to shut down the way Ctrl-C does, then ends
whatever is left in the session (code servers) and checks that nothing is
left and the UI's port is free.

The rule: ``dev`` ends everything *it* started. The home's Postgres, Ray head
and daemon belong to the home, not to ``dev`` (a ``train`` of the same home
may be using them): ``dev`` starts them if they are down, leaves them running,
and ``rl-assets stop`` ends them (and a ``dev`` whose supervisor was SIGKILLed).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets.home.services.processes import Session, listening_sockets, wait_sockets_closed
from rl_assets.home.services.service_environment import service_environment
from rl_assets.home.services.ui_auth import ensure_token, login_url, token_path

GRACE_S = 10.0
"""How long the webserver gets to shut down by itself before its session is ended."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class DevServer:
    """Run, and end, the webserver process tree of a home."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.session_file = home.services / "dev.session"

    def session(self) -> Session | None:
        return Session.load(self.session_file)

    def run(self, host: str, port: int) -> int:
        """Serve until the webserver exits or a stop signal arrives; then end its whole session."""
        running = self.session()
        if running is not None and running.members():
            raise HomeError(f"rl-assets dev is already running for home {self.home.root} (session {running.sid})")
        token = ensure_token(self.home)
        received: list[int] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            received.append(signum)

        previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        workspace = LocalDaemon(self.home).write_workspace()
        cmd = [sys.executable, "-m", "rl_assets.home.services.ui_webserver", "--workspace", str(workspace)]
        cmd += ["--host", host, "--port", str(port), "--token-file", str(token_path(self.home))]
        print(f"Dagster UI for home {self.home.root}, for whoever has its token; log in at:", file=sys.stderr)
        print(f"    {login_url(host, port, token)}", file=sys.stderr)
        # Dagster's code servers listen on unix sockets in the temp folder: make that a private one.
        env = service_environment(self.home, "dev")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, env=env, cwd=self.home.root)
        session = Session.led_by(proc.pid)
        session.save(self.session_file)
        try:
            while not received and proc.poll() is None:
                time.sleep(0.2)
        finally:
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            self._shut_down(proc, session, port)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        print(
            "rl-assets dev: stopped; the home's Postgres, Ray head and daemon keep running "
            "(`rl-assets stop` ends them)",
            file=sys.stderr,
        )
        return 0 if received else (proc.returncode or 0)

    def _shut_down(self, proc: subprocess.Popen, session: Session, port: int) -> None:
        tree = session.members()  # now, while the webserver can still name its children
        sockets = listening_sockets({port})
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the webserver's own Ctrl-C path
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        session.end(also=tree)
        proc.poll()
        wait_sockets_closed(sockets)
        self.session_file.unlink(missing_ok=True)

    def stop(self) -> bool:
        """End a dev server of the home that outlived its supervisor; True if one was running."""
        session = self.session()
        if session is None:
            return False
        ended = session.end()
        self.session_file.unlink(missing_ok=True)
        return bool(ended)
