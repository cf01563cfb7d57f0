"""``rl-assets export --format skyrl``: an experiment's stored trajectories as SkyRL's generator output.

So rollouts made durably here can train elsewhere. SkyRL's trainer takes what a generator returns (token
ids, rewards, loss masks) and does the rest; with step-wise training each entry is one model call, which
is how :mod:`rl_assets.workloads.grpo.samples` cuts a trajectory for our own trainer, and this module
reuses that cut (:func:`~rl_assets.workloads.grpo.samples.model_calls`) so both train on the same tokens.

The shape is SkyRL's, field for field, from NovaSky-AI/SkyRL at commit a9564572eb8e (``skyrl`` 0.3.0):
``GeneratorOutput`` and ``TrajectoryID`` in ``skyrl/train/generators/base.py``; what
``validate_generator_output(..., step_wise=True)`` and ``_validate_step_wise_fields`` in
``skyrl/train/utils/trainer_utils.py`` assert; the rewards as ``docs/.../tutorials/step-wise-training.mdx``
assigns them. Every list has one entry per model call (per response); loss masks, per-token rewards
and rollout logprobs each have their response's length; a trajectory's calls are adjacent, and
``is_last_step`` is True exactly at the last of each.

How each field is filled, and why:

- ``prompt_token_ids``, ``response_ids``: each model call with a non-empty response, its ids chosen as
  samples.py chooses them: the server's recorded ids when the experiment's own served policy generated
  the trajectory, else the messages re-tokenized with the experiment's ``--model`` tokenizer. Uncut:
  SkyRL's own length limits apply there. An experiment without a language model (``--trainer none``)
  has no tokenizer and no policy of its own, so it exports whichever server's recorded ids; a call
  without them is re-tokenized with ``--tokenizer DIR`` (the trained model's checkpoint directory),
  and refused without one. A re-tokenized call whose response lost the message's text or tool calls
  (a template that renders ``content`` only) is refused, naming the model and the call
  (:func:`~rl_assets.workloads.grpo.samples.dropped_by_template`).
- ``loss_masks``: all 1s. A response is only what the model generated; tool output is only ever part of a
  later call's prompt, so nothing in a response needs masking.
- ``rewards``: per token, the trajectory's stored reward under the rubric on the last token of its last
  call and 0.0 elsewhere: SkyRL trains step-wise on trajectory-level rewards only, computes outcome
  advantages on last steps and broadcasts them to the trajectory's other steps.
- ``rollout_logprobs``: the sampling logprobs when every exported call has them, else None (SkyRL takes
  all or none; re-tokenized calls have none, and then SkyRL cannot correct off-policy ratios).
- ``trajectory_ids``: ``{"instance_id": "s<step>-<task>", "repetition_id": k}`` for trial
  ``s<step>-<task>-n<k>``: a ``TrajectoryID`` as ``dataclasses.asdict`` gives it. The instance is the
  prompt group (the task within its step), not the task alone: SkyRL groups GRPO samples by instance id,
  so an export of several steps stays one valid batch whose groups never mix two steps' policies.
- ``stop_reasons``: each call's finish reason.
- ``env_metrics``: per row (SkyRL's shape: one dict per response), the trial and how its agent acted:
  ``{"trial_id", "agent_protocol"}``, the protocol ``tools``, ``text`` or ``auto`` (``--agent-protocol``).
  Every other optional field is None (present, since SkyRL's trainer reads some of them by key).

The trials are each step's canonical batch, the one it trained on (trials that failed for good left
out, as in training), each trajectory checked against the hash its reward names, so what is exported is
what was judged. A trial without a model call that produced tokens has no entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Reward, Trajectory
from rl_assets.stores.home_stores import Stores
from rl_assets.trainer.batches import recorded_batch
from rl_assets.workloads.grpo.advantages import group_of
from rl_assets.workloads.grpo.model import base_tokenizer
from rl_assets.workloads.grpo.samples import model_calls
from rl_assets.workloads.grpo.tokenizer import ChatTokenizer, load_tokenizer
from rl_assets.workloads.grpo.trainer import SERVED_MODEL
from rl_assets.workloads.seams import TrainingWorkspace


class ExportError(Exception):
    """Why an experiment (or the step asked for) cannot be exported, in one line."""


def generator_output(
    trials: Iterable[tuple[Reward, Trajectory]], tokenizer: ChatTokenizer | None, served_as: str | None
) -> dict[str, Any]:
    """SkyRL's step-wise ``GeneratorOutput`` of ``trials`` (in order), as JSON-ready lists.

    ``tokenizer`` and ``served_as`` are :func:`model_calls`' (None, None: recorded ids only). Raises
    ``ValueError`` for a call it cannot give ids for and for recorded logprobs that do not fit their response.
    """
    prompts: list[list[int]] = []
    responses: list[list[int]] = []
    rewards: list[list[float]] = []
    logprobs: list[list[float] | None] = []
    stops: list[str] = []
    ids: list[dict[str, Any]] = []
    metrics: list[dict[str, str]] = []
    last: list[bool] = []
    for reward, trajectory in trials:
        calls = model_calls(trajectory, tokenizer, served_as)
        row = {"trial_id": reward.trial_id, "agent_protocol": _protocol(trajectory)}
        trajectory_id = {
            "instance_id": group_of(reward.trial_id),
            "repetition_id": int(reward.trial_id.rpartition("-n")[2]),
        }
        for i, call in enumerate(calls):
            final = i == len(calls) - 1
            if call.logprobs is not None and len(call.logprobs) != len(call.response_ids):
                raise ValueError(f"trajectory {reward.trial_id}: a call's logprobs do not match its response tokens")
            prompts.append(list(call.prompt_ids))
            responses.append(list(call.response_ids))
            token_rewards = [0.0] * len(call.response_ids)
            if final:
                token_rewards[-1] = float(reward.reward)
            rewards.append(token_rewards)
            logprobs.append(None if call.logprobs is None else list(call.logprobs))
            stops.append(call.finish_reason)
            ids.append(dict(trajectory_id))
            metrics.append(dict(row))
            last.append(final)
    return {
        "prompt_token_ids": prompts,
        "response_ids": responses,
        "rewards": rewards,
        "loss_masks": [[1] * len(r) for r in responses],
        "stop_reasons": stops,
        "rollout_metrics": None,
        "rollout_logprobs": logprobs if logprobs and all(lp is not None for lp in logprobs) else None,
        "trajectory_ids": ids,
        "trajectory_generation_times": None,
        "trajectory_time_splits": None,
        "rollout_expert_indices": None,
        "is_last_step": last,
        "env_metrics": metrics,
        "pixel_values": None,
        "image_grid_thw": None,
    }


def _protocol(trajectory: Trajectory) -> str:
    transcript = trajectory.transcript
    return "tools" if transcript is None or transcript.protocol is None else transcript.protocol


def _tokenizer(config: ExperimentConfig, tokenizer_dir: Path | None) -> tuple[ChatTokenizer | None, str | None]:
    """The tokenizer to re-tokenize with and the model whose recorded ids are the policy's own (see the module)."""
    if tokenizer_dir is not None:
        if config.trainer == "grpo":
            raise ExportError(
                f"--tokenizer: experiment {config.name!r} trains its own model ({config.model}), whose tokenizer "
                "its export uses"
            )
        return _loaded("--tokenizer", str(tokenizer_dir), lambda: load_tokenizer(tokenizer_dir)), None
    if config.trainer == "grpo" and config.model is not None:
        model = config.model
        return _loaded("--model", model, lambda: base_tokenizer(model)), SERVED_MODEL
    return None, None


def _loaded(where: str, base: str, load: Callable[[], ChatTokenizer]) -> ChatTokenizer:
    """``load()``, its failure an :class:`ExportError` naming the option it came from."""
    try:
        return load()
    except ImportError:
        raise ExportError(f"{where}: loading a tokenizer needs transformers: pip install 'rl-assets[llm]'") from None
    except (OSError, ValueError) as err:
        raise ExportError(f"the tokenizer of {where} {base} does not load: {_first_line(err)}") from None


def skyrl_output(
    config: ExperimentConfig, trials: list[tuple[Reward, Trajectory]], tokenizer_dir: Path | None = None
) -> dict[str, Any]:
    """:func:`generator_output` of an experiment's trials, with its model's tokenizer or ``tokenizer_dir``'s."""
    _check_exportable(config)
    tokenizer, served_as = _tokenizer(config, tokenizer_dir)
    try:
        output = generator_output(trials, tokenizer, served_as)
    except ValueError as err:
        if tokenizer is not None:
            raise ExportError(_first_line(err)) from None
        raise ExportError(
            f"{_first_line(err)}; experiment {config.name!r} has no language model to re-tokenize its transcripts "
            "with: pass --tokenizer DIR (the checkpoint directory of the model they are for)"
        ) from None
    if not output["response_ids"]:
        raise ExportError(f"experiment {config.name!r}: no model call of the steps asked for produced tokens")
    return output


def export_skyrl(
    stores: Stores,
    config: ExperimentConfig,
    step: int | None = None,
    rubric: str | None = None,
    tokenizer_dir: Path | None = None,
) -> dict[str, Any]:
    """The trained steps of ``config`` (or just ``step``) under ``rubric`` (default: the experiment's) for SkyRL,
    re-tokenized where needed with ``tokenizer_dir`` (an experiment without a model of its own)."""
    _check_exportable(config)
    scored = config if rubric is None else config.scored_with(rubric)
    trained = [applied.step for applied in stores.training.steps(config.name, scored.rubric)]
    if not trained:
        how = "" if scored.rubric == config.rubric else " (re-score it with `rl-assets rescore` first)"
        raise ExportError(f"experiment {config.name!r} has no trained step under rubric {scored.rubric!r}{how}")
    if step is not None:
        if step not in trained:
            raise ExportError(
                f"--step: experiment {config.name!r} has trained steps {trained[0]} to {trained[-1]} "
                f"under rubric {scored.rubric!r} (got {step})"
            )
        trained = [step]
    workspace = TrainingWorkspace(stores.artifacts.root, config.name)
    trials = [(r, workspace.trajectory(r)) for s in trained for r in recorded_batch(stores, scored, s)[0]]
    return skyrl_output(config, trials, tokenizer_dir)


def _check_exportable(config: ExperimentConfig) -> None:
    """Refuse an experiment that has no chat transcripts: the bandit's trials are tool calls, not tokens."""
    if config.tasks is None:
        raise ExportError(
            f"experiment {config.name!r} runs the {config.workload!r} workload, which records no chat "
            "transcripts or tokens: only task experiments (--tasks) export to SkyRL"
        )


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
