"""``tasks check``'s oracle for a container task: its image built (once), ``solution/solve.sh`` run as the
agent in a fresh container of it, then the verifier, as a trial's attempt would run them; for a multi-step
task, each step's ``steps/<name>/solution/solve.sh`` in turn, by the steps' rules (:mod:`rl_assets.tasks.steps`)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from rl_assets.containers.images import ImageBuildError, ensure_image
from rl_assets.containers.runtime import ContainerCommandError, ContainerRuntimeUnavailable, container_runtime
from rl_assets.containers.sessions import ContainerSessionError, container_session
from rl_assets.sandbox.exec_protocol import tree_archive
from rl_assets.tasks.check import OracleRun
from rl_assets.tasks.steps import run_steps, step_dir
from rl_assets.tasks.task import Task
from rl_assets.tasks.verifier import VerifierError

ORACLE_TIMEOUT_S = 600.0
"""A solution's time when the task's ``[agent] timeout_sec`` says none (as in the bubblewrap sandbox)."""


def run_container_oracle(task: Task) -> OracleRun:
    """``solution/solve.sh`` as the agent in a container of the task's image, then the verifier."""
    start = time.monotonic()
    ends: list[str] = []
    solved = lambda: ", ".join(ends) or "not run"  # noqa: E731  how each solve.sh run ended
    try:
        runtime = container_runtime()
        image = ensure_image(runtime, task)
        timeout_s = task.config.agent.timeout_sec or ORACLE_TIMEOUT_S
        with container_session(runtime, task, image, f"oracle/{task.name}/{uuid.uuid4().hex}") as session:

            def solve_in(solution: Path, seconds: float) -> str:
                session.put(tree_archive(solution), "/solution")
                agent = session.agent.command(
                    "bash /solution/solve.sh", seconds, workdir=session.workdir, env=task.config.solution.env
                )
                ends.append(f"timed out after {seconds:g}s" if agent.timed_out else f"exit {agent.exit_code}")
                return agent.output.strip()

            if task.config.steps:
                act = lambda step, _instruction, seconds: solve_in(step_dir(task, step) / "solution", seconds)  # noqa: E731
                deadline = time.monotonic() + ORACLE_TIMEOUT_S * len(task.config.steps)
                outcome = run_steps(task, session, act, deadline, timeout_s)
            else:
                outcome = session.verify(answer=solve_in(task.path / "solution", timeout_s))
        return OracleRun(seconds=time.monotonic() - start, reward=outcome.reward, solve=solved(), output=outcome.output)
    except VerifierError as err:
        return OracleRun(
            seconds=time.monotonic() - start, error=f"{type(err).__name__}: {err}", solve=solved(), output=err.output
        )
    except ImageBuildError as err:
        return OracleRun(
            seconds=time.monotonic() - start, error=f"ImageBuildError: {err}", solve=solved(), output=err.log_tail
        )
    except (ContainerSessionError, ContainerCommandError, ContainerRuntimeUnavailable) as err:
        return OracleRun(seconds=time.monotonic() - start, error=f"{type(err).__name__}: {err}", solve=solved())
