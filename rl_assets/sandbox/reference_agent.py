"""The reference agent's process inside the sandbox (standard library only; the sandbox binds it as ``/app/main.py``).

It reads its task from stdin, asks the harness for every document over the tool pipes (the harness
records each turn itself), and writes its files into its working directory, the fork. Nothing it prints
is a result: the harness builds the trajectory from the turns it served and the files it finds in the fork.
"""

from __future__ import annotations

import json
import os
import sys
import time

from rl_assets.domain.reference_policy import act

TOOL_REQUESTS_FD = 3
TOOL_REPLIES_FD = 4
EXIT_FAULT = 3


def main() -> int:
    task = json.loads(sys.stdin.readline())
    requests = os.fdopen(TOOL_REQUESTS_FD, "w", encoding="utf-8")
    replies = os.fdopen(TOOL_REPLIES_FD, "r", encoding="utf-8")

    def read(path: str) -> str:
        requests.write(json.dumps({"read": path}) + "\n")
        requests.flush()
        reply = json.loads(replies.readline())
        if "error" in reply:
            raise PermissionError(reply["error"])
        return reply["text"]

    def write(path: str, text: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def on_fault_draw(draw: float) -> None:
        if draw < task["fail_below"]:
            print(f"injected sandbox fault (fault draw {draw:.3f} < {task['fail_below']})", file=sys.stderr)
            sys.exit(EXIT_FAULT)
        while task["hang"]:  # an injected hung sandbox: only the harness's timeout ends it
            time.sleep(3600)

    act(task["trial_id"], task["max_turns"], task["prior"], read, write, on_fault_draw)
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
