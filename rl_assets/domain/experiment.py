"""An experiment: the desired state of one training run, and its trial plan.

The config is recorded once when the experiment is created; everything the
driver and the assets need (which worlds, which trials in which step, which
rubric) is derived from it, so no process has to remember anything.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.language_model import TINY_MODEL
from rl_assets.domain.models import FailedTrialPolicy, TrialSpec
from rl_assets.domain.names import (
    API_KEY_NAME_RULE,
    EXPERIMENT_NAME_RULE,
    RUBRIC_NAME_RULE,
    WORKLOAD_NAME_RULE,
    ApiKeyName,
    ExperimentName,
    RubricName,
    TaskName,
    WorkloadName,
)

# Upper bounds: far above any real use of the reference workload, low enough that a typo
# (--steps 1000000000, --lr 1e300) is refused up front instead of exhausting memory or time later.
MAX_STEPS = 100_000
MAX_COUNT = 10_000
MAX_TRIALS_PER_STEP = 100_000
MAX_LR = 1000.0
MAX_TURNS = 1000
MAX_RETRIES = 100
DEFAULT_RUBRIC = "v1"
DEFAULT_TASK_RUBRIC = "task-done"
"""The built-in LLM judge rubric (:data:`rl_assets.domain.judge_rubric.DEFAULT_JUDGE_RUBRIC`)."""
TASKS_WORKLOAD = "tasks"
"""The workload of Harbor task sets: a tool-using agent over an OpenAI-compatible API, the task's verifier."""
JudgeKind = Literal["none", "llm"]
TrainerKind = Literal["none", "grpo"]
PolicyKind = Literal["local"]
ToolChoice = Literal["auto", "required", "none"]
StructuredOutput = Literal["auto", "off"]
JudgeFailure = Literal["fail", "verifier-only"]
OnOff = Literal["on", "off"]
AgentProtocol = Literal["tools", "text", "auto"]
LOCAL_POLICY_MODEL = "local"
"""The model name the home's own policy server answers as (``--policy local``)."""
MAX_GRPO_LR = 0.1
"""A language model's learning rate; the bandit's default (2.0) would wreck one, so grpo refuses it."""
DEFAULT_CLIP = 0.2
DEFAULT_MICRO_BATCH = 4
GRPO_FIELDS = ("model", "clip", "kl_coef", "micro_batch")
DEPLOYMENT_FIELDS = ("policy_url", "policy_key_name", "judge_url", "judge_key_name")
"""Where the models are served and which stored key each is presented: deployment, not identity. The model names
and their sampling settings are identity (another model, other trajectories); a URL or a key is not."""
ROLLOUT_SETTINGS = (
    "agent_protocol",
    "policy_max_tokens",
    "policy_temperature",
    "policy_top_p",
    "policy_tool_choice",
    "policy_token_ids",
)
"""The settings that change how a trial acts (another value, other trajectories): in each trajectory's identity."""
JUDGE_SETTINGS = (
    "judge_max_tokens",
    "judge_temperature",
    "judge_structured_output",
    "judge_malformed_retries",
    "judge_failure",
)


def _task_field(description: str, **extra: object) -> Any:
    """A field only task experiments set: absent (None) otherwise, and then left out of the config's JSON,
    so a reference config dumps (and hashes) as it did before task experiments existed."""
    return Field(None, exclude_if=lambda v: v is None, description=description, **extra)


def is_derived(field: FieldInfo) -> bool:
    """A field the program fills in from others (``task_worlds`` from ``tasks``): no flag or launchpad field sets it."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("derived"))


class ExperimentConfig(BaseModel):
    """Everything that determines an experiment's results.

    Two runs with equal configs give byte-identical results, whatever faults
    were injected along the way; so changing any field of an existing
    experiment is refused instead of silently mixing two experiments. This
    model is the one schema of an experiment: the CLI's flags and the
    launchpad's config are derived from its fields, so each bound is
    written here only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ExperimentName = Field(description=f"Experiment name: {EXPERIMENT_NAME_RULE}.")
    steps: int = Field(3, ge=1, le=MAX_STEPS, description=f"Training steps (1 to {MAX_STEPS}).")
    worlds: int = Field(3, ge=1, le=MAX_COUNT, description=f"Worlds w0..w{{worlds-1}} (1 to {MAX_COUNT}).")
    prompts: int = Field(
        3, ge=1, le=MAX_COUNT, description=f"Prompts per step; prompt p uses world p % worlds (1 to {MAX_COUNT})."
    )
    samples: int = Field(
        2,
        ge=1,
        le=MAX_COUNT,
        description=f"Samples (trials) per prompt (1 to {MAX_COUNT}; prompts x samples at most {MAX_TRIALS_PER_STEP}).",
    )
    lr: float = Field(2.0, ge=0, le=MAX_LR, allow_inf_nan=False, description=f"Bandit learning rate (0 to {MAX_LR:g}).")
    max_turns: int = Field(6, ge=1, le=MAX_TURNS, description=f"Document reads allowed per trial (1 to {MAX_TURNS}).")
    rubric: RubricName = Field(
        DEFAULT_RUBRIC,
        description=f"Rubric (built-in or in the home's registry) to judge with; a name of {RUBRIC_NAME_RULE}.",
    )
    generate_retries: int = Field(
        2, ge=0, le=MAX_RETRIES, description=f"Retries of a trial's rollout before it fails (0 to {MAX_RETRIES})."
    )
    judge_retries: int = Field(
        2, ge=0, le=MAX_RETRIES, description=f"Retries of a trial's judging before it fails (0 to {MAX_RETRIES})."
    )
    failed_trial_policy: FailedTrialPolicy = Field(
        "skip",
        description=(
            "What a step does with a trial that failed for good: 'skip' drops the trial, "
            "'mask-group' drops every trial of its prompt group."
        ),
    )
    tasks: str | None = _task_field(
        "A Harbor task set: a directory of task directories (or one task). Each step samples every task "
        "--samples times (trial s<step>-<task>-n<k>); --worlds and --prompts do not apply. Implies --workload tasks."
    )
    task_worlds: dict[TaskName, str] | None = _task_field(
        "Derived from --tasks when the experiment is recorded: each task's name and its sealed world.",
        json_schema_extra={"derived": True},
    )
    policy: PolicyKind | None = _task_field(
        "'local': the home serves the policy being trained (--trainer grpo) to the agent, each step's "
        "rollouts from the previous step's checkpoint; no --policy-url or --policy-model then."
    )
    policy_url: str | None = _task_field(
        "Base URL (ending in /v1) of the OpenAI-compatible server the agent's model answers from."
    )
    policy_model: str | None = _task_field("The model name the agent asks that server for.")
    policy_key_name: ApiKeyName | None = _task_field(
        "The name of the API key the agent presents to --policy-url, stored in the home with "
        f"`rl-assets keys set NAME` ({API_KEY_NAME_RULE}); read when each trial starts. Unset: no key."
    )
    agent_protocol: AgentProtocol | None = _task_field(
        "How the agent acts: 'tools' (the default) by tool calls; 'text' by one fenced shell block per answer, run "
        "and its output returned (for models without tool calling); 'auto' offers the tools and runs a fenced "
        "block when the model answers with one instead."
    )
    policy_max_tokens: int | None = _task_field(
        "Most tokens the agent's model may answer per call (1 to 1000000); unset: the server's default.",
        ge=1,
        le=1_000_000,
    )
    policy_temperature: float | None = _task_field(
        "The agent's sampling temperature (0 to 2); unset: the server's default.", ge=0, le=2, allow_inf_nan=False
    )
    policy_top_p: float | None = _task_field(
        "The agent's nucleus sampling (0 to 1]; unset: the server's default.", gt=0, le=1, allow_inf_nan=False
    )
    policy_tool_choice: ToolChoice | None = _task_field(
        "The tool_choice sent with the agent's tools: 'auto' (the default) lets the model choose, 'required' "
        "makes it call one. Sent explicitly, since some servers (llama-cpp-python) drop the tools without it."
    )
    policy_token_ids: OnOff | None = _task_field(
        "'off': ask the policy server for neither logprobs nor vLLM's token ids (hosted APIs may refuse "
        "them with a 400); 'on' (the default) asks for both."
    )
    judge: JudgeKind | None = _task_field(
        "Task experiments: 'llm' adds an LLM judge's score to the verifier's reward (the default with "
        "--judge-url); 'none' trains on the verifier alone (the default without)."
    )
    judge_url: str | None = _task_field(
        "Base URL (ending in /v1) of the OpenAI-compatible server the LLM judge answers from."
    )
    judge_model: str | None = _task_field("The model name the LLM judge asks that server for.")
    judge_key_name: ApiKeyName | None = _task_field(
        "The name of the API key the judge presents to --judge-url, stored with `rl-assets keys set NAME`; "
        "read at each judge call. Unset: no key."
    )
    judge_max_tokens: int | None = _task_field(
        "Most tokens the judge may answer per call (1 to 1000000); unset: the server's default.", ge=1, le=1_000_000
    )
    judge_temperature: float | None = _task_field(
        "The judge's sampling temperature (0 to 2); unset: the server's default.", ge=0, le=2, allow_inf_nan=False
    )
    judge_structured_output: StructuredOutput | None = _task_field(
        "'auto' (the default): ask the judge for a JSON verdict by schema (OpenAI's response_format, which "
        "vLLM, SGLang and llama.cpp follow), and ask by the prompt alone where the server refuses it; 'off': "
        "the prompt alone."
    )
    judge_malformed_retries: int | None = _task_field(
        f"Calls made again after a malformed verdict (the judge answered, and was billed, without a usable "
        f"score), before the trial's judging fails (0 to {MAX_RETRIES}; default 0). --judge-retries counts "
        "calls that got no answer.",
        ge=0,
        le=MAX_RETRIES,
    )
    judge_failure: JudgeFailure | None = _task_field(
        "What a trial whose judging failed for good becomes: 'fail' (the default) fails it; 'verifier-only' "
        "rewards it with its verifier's reward alone, marked unjudged."
    )
    trainer: TrainerKind | None = _task_field(
        "'none' keeps the policy fixed: each step is an evaluation pass (the default for tasks); "
        "'grpo' trains a causal LM (--model) on the step's trajectories in the trainer actor (the 'llm' extra)."
    )
    model: str | None = _task_field(
        f"--trainer grpo: the causal LM to train: '{TINY_MODEL}' (a small model built from a config, seeded, "
        "byte-level tokenizer, no download) or the absolute path of a local checkpoint directory."
    )
    clip: float | None = _task_field(
        f"--trainer grpo: clip range of the importance ratio (0 to 10; default {DEFAULT_CLIP}).",
        gt=0,
        le=10,
        allow_inf_nan=False,
    )
    kl_coef: float | None = _task_field(
        "--trainer grpo: weight of the KL to the base model (0 to 100); unset: no KL term.",
        ge=0,
        le=100,
        allow_inf_nan=False,
    )
    micro_batch: int | None = _task_field(
        f"--trainer grpo: samples per forward/backward pass (1 to 1024; default {DEFAULT_MICRO_BATCH}).",
        ge=1,
        le=1024,
    )
    workload: WorkloadName = Field(
        "reference",
        description=(
            "The registered workload (agent, judge and trainer) to run: 'reference' is the bandit of "
            f"reference-workload.md; a name of {WORKLOAD_NAME_RULE}. Configs stored before this field run 'reference'."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _tasks_imply_their_workload(cls, data: object) -> object:
        """``--tasks`` selects the tasks workload in place of the default one, and its defaults."""
        if isinstance(data, dict) and data.get("tasks") is not None:
            data = dict(data)
            if data.get("workload") in (None, "reference"):
                data["workload"] = TASKS_WORKLOAD
            if data.get("judge") is None:
                data["judge"] = "none" if data.get("judge_url") is None else "llm"
            if data.get("trainer") is None:
                data["trainer"] = "none"
            if data.get("trainer") == "grpo":
                if data.get("clip") is None:
                    data["clip"] = DEFAULT_CLIP
                if data.get("micro_batch") is None:
                    data["micro_batch"] = DEFAULT_MICRO_BATCH
            if data.get("rubric") in (None, DEFAULT_RUBRIC):  # the reference default cannot judge a task
                data["rubric"] = DEFAULT_TASK_RUBRIC
        return data

    @model_validator(mode="after")
    def _task_fields_for_task_workloads(self) -> ExperimentConfig:
        task_only = (
            "policy",
            "policy_url",
            "policy_model",
            "policy_key_name",
            "judge",
            "judge_url",
            "judge_model",
            "judge_key_name",
            "trainer",
            *ROLLOUT_SETTINGS,
            *JUDGE_SETTINGS,
            *GRPO_FIELDS,
        )
        if self.tasks is None:
            given = [f for f in (*task_only, "task_worlds") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} apply to task experiments only (give --tasks)")
            if self.workload == TASKS_WORKLOAD:
                raise ValueError(f"the {TASKS_WORKLOAD!r} workload needs --tasks (a task set directory)")
            return self
        if self.policy == "local":
            if self.policy_url is not None or self.policy_model is not None or self.policy_key_name is not None:
                raise ValueError(
                    "--policy local takes no --policy-url, --policy-model or --policy-key-name (the home serves it)"
                )
            if self.trainer != "grpo":
                raise ValueError("--policy local serves the model --trainer grpo trains: give --trainer grpo")
            sampled = ("policy_token_ids", "policy_temperature", "policy_top_p")
            fixed = [f for f in sampled if getattr(self, f) is not None]
            if fixed:  # the trainer's importance ratio needs the token ids, sampled as its own policy samples
                raise ValueError(f"--policy local takes no {', '.join('--' + f.replace('_', '-') for f in fixed)}")
        elif self.policy_url is None or self.policy_model is None:
            raise ValueError("a task experiment needs --policy-url and --policy-model (or --policy local)")
        for field in ("policy_url", "judge_url"):
            url = getattr(self, field)
            if url is not None and not re.fullmatch(r"https?://\S+/v1/?", url):
                raise ValueError(f"{field} must be the server's base URL (http or https), ending in /v1")
        if self.judge == "llm" and (self.judge_url is None or self.judge_model is None):
            raise ValueError("an LLM judge needs --judge-url and --judge-model (or --judge none)")
        if self.judge == "none":
            judge_fields = ("judge_url", "judge_model", "judge_key_name", *JUDGE_SETTINGS)
            given = [f for f in judge_fields if getattr(self, f) is not None]
            if given:
                raise ValueError(f"--judge none takes no {', '.join('--' + f.replace('_', '-') for f in given)}")
        return self._grpo_fields_for_grpo()

    def _grpo_fields_for_grpo(self) -> ExperimentConfig:
        if self.trainer != "grpo":
            given = [f for f in GRPO_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} apply to --trainer grpo only")
            return self
        if self.model is None:
            raise ValueError(f"--trainer grpo needs --model ('{TINY_MODEL}' or a checkpoint directory)")
        if self.model != TINY_MODEL and not os.path.isabs(self.model):
            raise ValueError(f"--model must be '{TINY_MODEL}' or an absolute path (a checkpoint directory)")
        if self.lr > MAX_GRPO_LR:
            raise ValueError(
                f"--trainer grpo needs --lr at most {MAX_GRPO_LR:g} (a language model's learning rate; "
                "the default 2.0 is the bandit's)"
            )
        return self

    @model_validator(mode="after")
    def _bounded_batch(self) -> ExperimentConfig:
        if self.prompts * self.samples > MAX_TRIALS_PER_STEP:
            raise ValueError(
                f"prompts x samples (trials per step) must be at most {MAX_TRIALS_PER_STEP} "
                f"(got {self.prompts} x {self.samples})"
            )
        return self

    @property
    def config_hash(self) -> str:
        """The config as recorded, every field; see :attr:`identity_hash` for what makes it the same experiment."""
        return content_hash(self.model_dump(mode="json"))

    @property
    def identity_hash(self) -> str:
        """Identity of the experiment: equal hashes mean the same experiment. Every field but the deployment's
        (:data:`DEPLOYMENT_FIELDS`), so resuming against a server that moved, or with a renamed key, goes on."""
        return content_hash(self.model_dump(mode="json", exclude=set(DEPLOYMENT_FIELDS)))

    @property
    def rollout_settings(self) -> dict[str, object]:
        """The :data:`ROLLOUT_SETTINGS` this experiment sets: part of its trajectories' identity (none: as before)."""
        return {f: getattr(self, f) for f in ROLLOUT_SETTINGS if getattr(self, f) is not None}

    @property
    def task_names(self) -> list[str]:
        """The task set's task names, sorted (empty for the reference workload)."""
        return sorted(self.task_worlds or {})

    @property
    def world_ids(self) -> list[str]:
        if self.tasks is not None:
            return sorted(set(self._task_worlds().values()))
        return [f"w{i}" for i in range(self.worlds)]

    def _task_worlds(self) -> dict[str, str]:
        if self.task_worlds is None:
            raise ValueError(f"task experiment {self.name} has no resolved task set (record it through the CLI)")
        return self.task_worlds

    def step_key(self, step: int) -> str:
        """The step's partition key: ``{experiment}/s{step}``."""
        return f"{self.name}/s{step}"

    def trial_slots(self) -> list[str]:
        """Trial partition keys, the same every step: ``p{p}-n{n}``."""
        if self.tasks is not None:
            return [f"{t}-n{n}" for t in self.task_names for n in range(self.samples)]
        return [f"p{p}-n{n}" for p in range(self.prompts) for n in range(self.samples)]

    def trial_ids(self, step: int) -> list[str]:
        """The step's trial ids in canonical order, made without their specs: the planner and the progress line
        read them on every tick, and a spec is a validated model (256 of them were 40% of a tick's CPU)."""
        return sorted(f"s{step}-{slot}" for slot in self.trial_slots())

    def trials(self, step: int) -> list[TrialSpec]:
        """The step's trial specs, sorted by trial id (the canonical order)."""
        count = len(self.task_names) if self.tasks is not None else self.prompts
        specs = [self._spec(step, p, n) for p in range(count) for n in range(self.samples)]
        return sorted(specs, key=lambda s: s.trial_id)

    def _spec(self, step: int, p: int, n: int) -> TrialSpec:
        """Sample ``n`` of prompt (or task) ``p`` of ``step``: the one place a trial's spec is made."""
        if self.tasks is not None:
            task = self.task_names[p]
            return TrialSpec(
                trial_id=f"s{step}-{task}-n{n}",
                step=step,
                prompt_index=p,
                sample_index=n,
                world_id=self._task_worlds()[task],
                prompt=task,
                max_turns=self.max_turns,
            )
        return TrialSpec(
            trial_id=f"s{step}-p{p}-n{n}",
            step=step,
            prompt_index=p,
            sample_index=n,
            world_id=f"w{p % self.worlds}",
            max_turns=self.max_turns,
        )

    def scored_with(self, rubric: str) -> ExperimentConfig:
        """The same experiment seen under another rubric: what re-scoring judges and trains with.

        Validated like any config (``model_copy`` would not be), so a rubric
        name from a tag or a request row is checked before it names a path.
        """
        return self.with_changes(rubric=rubric)

    def with_changes(self, **fields: object) -> ExperimentConfig:
        """This config with ``fields`` replaced, validated by the schema (a fork's name and rubric)."""
        return ExperimentConfig.model_validate({**self.model_dump(), **fields})

    def trial(self, step: int, slot: str) -> TrialSpec:
        """The spec of trial ``slot`` of ``step``; a clear error if it is not planned.

        Made from the slot alone, not found among the step's specs: a rollout run looks up each of its
        hundreds of trials."""
        head, _, sample = slot.rpartition("-n")
        n = int(sample) if sample.isdigit() and sample == str(int(sample)) else -1
        if 0 <= n < self.samples:
            if self.tasks is not None:
                if head in self.task_names:
                    return self._spec(step, self.task_names.index(head), n)
            elif (
                head[:1] == "p" and head[1:].isdigit() and head == f"p{int(head[1:])}" and int(head[1:]) < self.prompts
            ):
                return self._spec(step, int(head[1:]), n)
        raise KeyError(f"trial s{step}-{slot} is not part of experiment {self.name}")


def parse_step_key(step_key: str) -> tuple[str, int]:
    """``"ref/s2"`` -> ``("ref", 2)``."""
    experiment, _, step = step_key.rpartition("/s")
    if not experiment or not step.isdigit():
        raise ValueError(f"not a step partition key: {step_key!r}")
    return experiment, int(step)
