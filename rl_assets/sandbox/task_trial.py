"""The trusted phases of a Harbor task's trial, through the task sandbox: the verifier, and the oracle agent.

The verifier runs ``tests/test.sh`` on the fork as the agent left it. Its ``/tests`` (a copy of the
task's ``tests/``) and ``/logs/verifier`` (fresh and empty) are directories of the attempt made only
now and bound for that one command, so no command of the agent ever saw the tests or could write the
reward: its commands' processes are all dead (each command's pid namespace died with it) and neither
path existed in their sandboxes. The reward is read on the host side of ``/logs/verifier`` by
:func:`rl_assets.tasks.verifier.read_rewards`.

The oracle is Harbor's: ``solution/solve.sh`` (copied to ``/solution``) as the agent, one command, then
the verifier (what ``solve.sh`` printed is the agent's final message), on a fresh fork of the task's
``environment/`` files; ``rl-assets tasks check`` runs it to prove each task solvable. The world is a
temporary copy, removed afterwards; the fork an overlay on it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.sandbox.task_shell import DEFAULT_WORKDIR, TaskSandboxError, TaskSandboxUnavailable, TaskShell
from rl_assets.tasks.check import OracleRun
from rl_assets.tasks.task import Task
from rl_assets.tasks.verifier import VerifierError, VerifierResult, VerifierTimeout, read_rewards

ANSWER_FILE = "answer.txt"
"""The agent's final message, in ``/logs/agent`` for the verifier."""
ORACLE_TIMEOUT_S = 600.0
"""``solve.sh``'s timeout when the task's ``[agent] timeout_sec`` is unset (Harbor's: none at all)."""


def verify(shell: TaskShell, task: Task, answer: str = "") -> VerifierResult:
    """Run the task's ``tests/test.sh`` in ``shell``'s fork; its reward, or a :class:`VerifierError`.

    ``answer``, the agent's final message, is in ``/logs/agent/answer.txt`` (written here, on the trusted
    side, into a directory the agent never saw) for verifiers that grade what the agent said.
    """
    config = task.config
    tests = shell.new_dir(copy_of=task.path / "tests")
    logs = shell.new_dir()
    agent_logs = shell.new_dir()
    (agent_logs / ANSWER_FILE).write_text(answer, encoding="utf-8")
    result = shell.run_phase(
        "bash /tests/test.sh",
        config.verifier.timeout_sec,
        mounts={"/tests": tests, "/logs/verifier": logs, "/logs/agent": agent_logs},
        env=config.verifier.env,
    )
    if result.timed_out:
        raise VerifierTimeout(f"tests/test.sh ran past {config.verifier.timeout_sec:g}s and was killed", result.output)
    try:
        rewards = read_rewards(logs)
    except VerifierError as err:
        err.output = result.output
        raise
    return VerifierResult(
        reward=rewards["reward"],
        rewards=rewards,
        output=result.output,
        truncated=result.truncated,
        seconds=result.seconds,
        exit_code=result.exit_code,
    )


def task_shell(task: Task, fork: ForkLayout) -> TaskShell:
    """The sandbox for an attempt at ``task`` on ``fork``: its ``[environment]`` working directory and env."""
    environment = task.config.environment
    return TaskShell(fork, workdir=environment.workdir or DEFAULT_WORKDIR, env=environment.env)


def run_oracle(task: Task) -> OracleRun:
    """``solution/solve.sh`` as the agent on a fresh fork of the task's environment, then the verifier."""
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="rl-assets-oracle-"))
    solve = "not run"
    try:
        world = scratch / "world"
        shutil.copytree(task.path / "environment", world, symlinks=True)
        fork = ForkLayout(
            kind="overlay",
            lower=str(world),
            upper=str(scratch / "fork" / "upper"),
            work=str(scratch / "fork" / "work"),
            merged=str(scratch / "fork" / "merged"),
        )
        for d in (fork.upper, fork.work, fork.merged):
            Path(d).mkdir(parents=True)
        timeout_s = task.config.agent.timeout_sec or ORACLE_TIMEOUT_S
        with task_shell(task, fork) as shell:
            solution = shell.new_dir(copy_of=task.path / "solution")
            agent = shell.run_phase(
                "bash /solution/solve.sh", timeout_s, mounts={"/solution": solution}, env=task.config.solution.env
            )
            solve = f"timed out after {timeout_s:g}s" if agent.timed_out else f"exit {agent.exit_code}"
            verdict = verify(shell, task, answer=agent.output.strip())  # the oracle's last word: what it printed
        return OracleRun(seconds=time.monotonic() - start, reward=verdict.reward, solve=solve)
    except (VerifierError, TaskSandboxError, TaskSandboxUnavailable) as err:
        return OracleRun(seconds=time.monotonic() - start, error=f"{type(err).__name__}: {err}", solve=solve)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
