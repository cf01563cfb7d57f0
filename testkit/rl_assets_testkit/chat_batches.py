"""Chat trajectories and their rewards, stored as the trajectories asset stores them: batches for the GRPO tests."""

from __future__ import annotations

from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Reward, Trajectory
from rl_assets.domain.transcripts import Message, ModelTurn, ToolCall, Transcript, Usage
from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.trials import TrialRecords

TASKS = ("greet", "sum")


def chat_trajectory(trial_id: str, answer: str, model: str = "policy", ids: bool = False) -> Trajectory:
    """A two-call trial: a tool call (``cat hello.txt``), its output, then a final ``answer``.

    With ``ids``, each call carries prompt and completion ids and logprobs, in the byte tokenizer's range.
    """
    messages = (
        Message(role="user", content=f"Task {trial_id.split('-')[1]}: write the answer."),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="bash", arguments='{"command": "ls"}'),)),
        Message(role="tool", content="hello.txt\nTOOL OUTPUT", tool_call_id="c1"),
        Message(role="assistant", content=answer),
    )

    def turn(index: int, completion: tuple[int, ...]) -> ModelTurn:
        return ModelTurn(
            message_index=index,
            finish_reason="stop",
            usage=Usage(prompt_tokens=10, completion_tokens=len(completion)),
            prompt_token_ids=(257, 260, *b"Task") if ids else None,
            token_ids=completion if ids else None,
            logprobs=tuple(-5.5 for _ in completion) if ids else None,
        )

    transcript = Transcript(
        model=model,
        messages=messages,
        turns=(turn(1, tuple(b"ls")), turn(3, tuple(answer.encode()))),
        ended="no_tool_call",
        usage=Usage(prompt_tokens=20, completion_tokens=4),
    )
    return Trajectory(
        trial_id=trial_id,
        world_id=f"task-{trial_id.split('-')[1]}",
        world_hash="w",
        policy_version=0,
        policy_hash="p",
        turns=[],
        answer="",
        files_written=[],
        transcript=transcript,
    )


def store_step(root: Path, experiment: str, step: int, rewards: dict[str, float], **kw: object) -> list[Reward]:
    """Store a trajectory per ``{trial slot: reward}`` of ``step`` under ``root``; the canonical batch of rewards."""
    records = TrialRecords(ArtifactStore(root))
    batch = []
    for slot, value in sorted(rewards.items()):
        trial_id = f"s{step}-{slot}"
        trajectory = chat_trajectory(trial_id, "yes" if value > 0.5 else "no", **kw)  # type: ignore[arg-type]
        records.save_trajectory(experiment, step, slot, trajectory)
        batch.append(
            Reward(
                trial_id=trial_id,
                world_id=trajectory.world_id,
                rubric_name="task-done",
                verified=value > 0.5,
                score=0.0,
                reward=value,
                found_doc=None,
                turns=2,
                trajectory_hash=trajectory.content_hash,
                verdict_hash="v",
                verifier_reward=value,
            )
        )
    return batch


STEP_REWARDS = (
    {"greet-n0": 1.0, "greet-n1": 0.0, "greet-n2": 0.5, "sum-n0": 0.0, "sum-n1": 1.0},
    {"greet-n0": 0.0, "greet-n1": 1.0, "greet-n2": 1.0, "sum-n0": 1.0, "sum-n1": 1.0},
    {"greet-n0": 1.0, "greet-n1": 1.0, "greet-n2": 0.0, "sum-n0": 0.0, "sum-n1": 0.0},
)
"""Three steps of rewards over two tasks (three and two samples)."""


GRPO_LR = 1e-2
"""A learning rate a tiny language model survives (the config's default is the bandit's)."""


def grpo_config(**extra: object) -> ExperimentConfig:
    """A two-task experiment trained by GRPO on the tiny model (no task directory is read)."""
    return ExperimentConfig(
        name="g",
        tasks="/tasks",
        task_worlds={"greet": "task-greet", "sum": "task-sum"},
        policy_url="http://127.0.0.1:1/v1",
        policy_model="policy",
        trainer="grpo",
        model="tiny",
        lr=GRPO_LR,
        **extra,
    )
