"""The reference agent's process inside the sandbox (standard library only; the sandbox binds it as ``/app/main.py``).

It reads its task from stdin, asks the harness for every document over the tool pipes (the harness
records each turn itself), and writes its files into its working directory, the fork. Nothing it prints
is a result: the harness builds the trajectory from the turns it served and the files it finds in the fork.

The protocol is plain text (:func:`rl_assets.sandbox.launcher.task_line` is the harness's side), so this process
imports no codec: ``json``, with the ``re`` and ``enum`` it imports, was 40% of its start.

- stdin, one line: ``trial_id max_turns fail_below hang prior...`` (floats as ``repr``; ``hang`` 0 or 1);
- fd 3, one line per request: ``read <path>``;
- fd 4, per request: ``ok <n>`` or ``error <n>``, a newline, then the ``n`` characters of the document or the reason.
"""

from __future__ import annotations

import io
import os
import sys
import time

from rl_assets.domain.reference_policy import act

TOOL_REQUESTS_FD = 3
TOOL_REPLIES_FD = 4
EXIT_FAULT = 3


def read_reply(replies: io.TextIOWrapper) -> tuple[bool, str]:
    """One reply: (ok, the document) or (False, why not). ``replies`` must not translate newlines. (Nothing here
    imports ``typing``, which imports ``re``: the annotations are never evaluated.)"""
    status, _, size = replies.readline().partition(" ")
    return status == "ok", replies.read(int(size))


def main() -> int:
    trial_id, max_turns, fail_below, hang, *prior = sys.stdin.readline().split()
    requests = os.fdopen(TOOL_REQUESTS_FD, "w", encoding="utf-8")
    replies = os.fdopen(TOOL_REPLIES_FD, "r", encoding="utf-8", newline="")  # n characters are n, \r\n included

    def read(path: str) -> str:
        requests.write(f"read {path}\n")
        requests.flush()
        ok, text = read_reply(replies)
        if not ok:
            raise PermissionError(text)
        return text

    def write(path: str, text: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def on_fault_draw(draw: float) -> None:
        if draw < float(fail_below):
            print(f"injected sandbox fault (fault draw {draw:.3f} < {float(fail_below)})", file=sys.stderr)
            sys.exit(EXIT_FAULT)
        while hang == "1":  # an injected hung sandbox: only the harness's timeout ends it
            time.sleep(3600)

    act(trial_id, int(max_turns), [float(weight) for weight in prior], read, write, on_fault_draw)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as stop:  # an injected fault's exit
        code = stop.code
    # Without the interpreter's teardown, about an eighth of this short process's CPU: every file it wrote is
    # closed already, and nothing is left to flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
