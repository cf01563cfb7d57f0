"""A Kubernetes rollout pod's inside: run the agent on the pod's fork volume, print the rollout.

Run as ``python -m rl_assets.sandbox.runner`` with a :class:`SandboxRequest` on stdin, by the rollout
pods only (the pod and its volume are that path's boundary). Locally, rollouts run in
:mod:`rl_assets.sandbox.launcher`'s bubblewrap sandbox instead, and nothing they print is a result.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rl_assets.domain.agent import run_agent
from rl_assets.sandbox.protocol import EXIT_FAULT, RESULT_MARKER, SandboxFault, SandboxRequest


class ForkTools:
    """File tools confined to the fork: a path that escapes it is refused."""

    def __init__(self, root: Path, latency_s: float) -> None:
        self.root = root.resolve()
        self.latency_s = latency_s

    def _inside(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if path != self.root and self.root not in path.parents:
            raise PermissionError(f"{rel!r} is outside the sandbox's fork")
        return path

    def read(self, path: str) -> str:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self._inside(path).read_text(encoding="utf-8")

    def write(self, path: str, text: str) -> None:
        self._inside(path).write_text(text, encoding="utf-8")


def main() -> int:
    request = SandboxRequest.model_validate_json(sys.stdin.read())
    if request.hang:
        while True:  # an injected hung sandbox: only the launcher's timeout ends it
            time.sleep(3600)

    def on_fault_draw(draw: float) -> None:
        if draw < request.fail_below:
            raise SandboxFault(f"injected sandbox fault (fault draw {draw:.3f} < {request.fail_below})")

    try:
        rollout = run_agent(
            request.spec,
            request.prior,
            ForkTools(Path(request.fork.merged), request.tool_latency_s),
            on_fault_draw=on_fault_draw,
        )
    except SandboxFault as fault:
        print(str(fault), file=sys.stderr)
        return EXIT_FAULT
    print(RESULT_MARKER + rollout.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
