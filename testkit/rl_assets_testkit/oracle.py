"""The reference workload, written from ``docs/reference-workload.md`` alone: the oracle the tests compare against.

Nothing here is imported from ``rl_assets`` (only the standard library), so a comparison with this oracle
checks the package's arithmetic (seeding, worlds, the agent, the verifier, the judge, the reward, the
trainer) as well as its orchestration: a bug in the package's domain code cannot cancel out. Every section
below names the part of the specification it implements; where the specification leaves a choice open the
docstring says which one is taken and why.

Plain numbers in, plain numbers out: a :class:`Config` of ints and floats and a :class:`Rubric` of weights.
Converting the package's ``ExperimentConfig`` to a :class:`Config` happens at the boundary, in the tests'
``conftest.py``.

Failed trials. A trial "fails for good" when every attempt it is allowed fails; the specification's faults
hit only a trial's first attempt, so that happens exactly when the first attempt faults and no retry is
allowed (:func:`failed_for_good`). Such a trial is absent from its step's batch (``skip``). Under
``mask-group`` the whole prompt group goes with it: every trial ``s{s}-p{p}-n*`` of the same step and prompt
(the trial id without its ``-n{n}`` sample suffix) leaves the batch, as the package's weights asset does it;
groups of other steps are untouched. The trainer still bumps the version for a step whose batch is empty,
and such a step has no mean (``None``).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from typing import Literal

N_DOCS = 8
PROMPT = "find the secret"
FailedTrialPolicy = Literal["skip", "mask-group"]


# --- Seeding ---------------------------------------------------------------------------------------------


def seed(*parts: str) -> int:
    """The first 8 hex digits of ``sha256("|".join(parts))`` (UTF-8) as an integer."""
    return int(hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:8], 16)


def rng(*parts: str) -> random.Random:
    return random.Random(seed(*parts))


# --- Configuration and the trial list --------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """The numbers that determine a run (the specification's defaults)."""

    steps: int = 3
    worlds: int = 3
    prompts: int = 3
    samples: int = 2
    lr: float = 2.0
    max_turns: int = 6
    failed_trial_policy: FailedTrialPolicy = "skip"

    @property
    def world_ids(self) -> list[str]:
        return [f"w{i}" for i in range(self.worlds)]

    def trial_ids(self, step: int) -> list[str]:
        """Step ``step``'s trial ids in canonical order: sorted by trial id (as strings)."""
        return sorted(f"s{step}-p{p}-n{n}" for p in range(self.prompts) for n in range(self.samples))

    def all_trial_ids(self) -> list[str]:
        return [t for s in range(self.steps) for t in self.trial_ids(s)]

    def world_of(self, trial_id: str) -> str:
        """Trial ``s{s}-p{p}-n{n}`` works on world ``w{p % worlds}``."""
        prompt = int(trial_id.split("-")[1][1:])
        return f"w{prompt % self.worlds}"


def step_of(trial_id: str) -> int:
    return int(trial_id.split("-")[0][1:])


def prompt_group(trial_id: str) -> str:
    """``s1-p2-n0`` -> ``s1-p2``: the trials of one prompt in one step."""
    return trial_id.rsplit("-", 1)[0]


# --- Worlds ------------------------------------------------------------------------------------------------


def world_secret(world_id: str) -> tuple[int, str]:
    """``(secret_doc, secret)``: two draws, in that order, from ``Random(seed("world", w))``."""
    r = rng("world", world_id)
    secret_doc = r.randrange(N_DOCS)
    secret = f"{world_id}-secret-{r.randrange(10**6):06d}"
    return secret_doc, secret


def world_documents(world_id: str) -> dict[str, str]:
    """The world's ``docs/`` directory: relative path -> text."""
    secret_doc, secret = world_secret(world_id)
    docs = {}
    for i in range(N_DOCS):
        lines = [f"title: report {i} for {world_id}", f"owner: team-{i % 3}", f"pages: {10 + i}"]
        if i == secret_doc:
            lines.append(f"secret: {secret}")
        docs[f"docs/doc_{i}.txt"] = "".join(line + "\n" for line in lines)
    return docs


# --- Injected faults ---------------------------------------------------------------------------------------


def fault_draw(trial_id: str) -> float:
    """The agent's first draw (step 2), the one that decides a sandbox fault."""
    return rng("trial", trial_id).random()


def sandbox_flakes(trial_id: str, rate: float) -> bool:
    return fault_draw(trial_id) < rate


def judge_flakes(trial_id: str, rate: float) -> bool:
    return rng("flake", trial_id).random() < rate


def hangs(trial_id: str, rate: float) -> bool:
    return rng("hang", trial_id).random() < rate


@dataclass(frozen=True)
class Faults:
    """Fault rates and retry budgets: which trials fail for good follows from them."""

    flaky_trial_rate: float = 0.0
    judge_flake_rate: float = 0.0
    hang_trial_rate: float = 0.0
    generate_retries: int = 2
    judge_retries: int = 2


def failed_for_good(config: Config, faults: Faults) -> frozenset[str]:
    """Trials with no reward: the first attempt faults (every fault hits only the first) and no retry is left.

    A rollout whose first attempt fails or hangs fails for good with ``generate_retries == 0``; a rollout that
    succeeds but whose judging's first attempt fails fails for good with ``judge_retries == 0``.
    """
    failed = set()
    for t in config.all_trial_ids():
        rollout_faults = sandbox_flakes(t, faults.flaky_trial_rate) or hangs(t, faults.hang_trial_rate)
        if rollout_faults and faults.generate_retries == 0:
            failed.add(t)
        elif judge_flakes(t, faults.judge_flake_rate) and faults.judge_retries == 0:
            failed.add(t)
    return frozenset(failed)


# --- The agent ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    doc: int
    found: bool


@dataclass(frozen=True)
class Trajectory:
    trial_id: str
    world_id: str
    policy_version: int
    turns: tuple[Turn, ...]
    answer: str
    files_written: tuple[str, ...]


def reading_order(r: random.Random, prior: list[float]) -> list[int]:
    """Step 3: draw without replacement, weighted by the prior, one ``choices`` call per pick."""
    remaining = list(range(N_DOCS))
    order = []
    while remaining:
        pick = r.choices(remaining, weights=[prior[i] for i in remaining], k=1)[0]
        order.append(pick)
        remaining.remove(pick)
    return order


def run_agent(
    trial_id: str, world_id: str, prior: list[float], max_turns: int, policy_version: int, fork: dict[str, str]
) -> Trajectory:
    """Steps 1-5 on ``fork`` (the trial's private copy of the world, path -> text; it gains the files written).

    The fault draw is taken and ignored: whether or not the attempt was doomed, a completed attempt's
    stream continues from the same place, so a retry gives the trajectory an unfailed attempt would have.
    """
    r = rng("trial", trial_id)
    r.random()  # the fault draw
    order = reading_order(r, prior)
    turns, answer = [], ""
    for doc in order[:max_turns]:
        text = fork[f"docs/doc_{doc}.txt"]
        found = "secret:" in text
        turns.append(Turn(doc, found))
        if found:
            answer = text.split("secret:", 1)[1].strip()
            break
    fork["answer.txt"] = answer
    files = ["answer.txt"]
    if r.random() < 0.3:
        fork["scratch.tmp"] = ""
        files.append("scratch.tmp")
    return Trajectory(trial_id, world_id, policy_version, tuple(turns), answer, tuple(files))


# --- Verifier, judge, reward ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rubric:
    name: str
    correctness_weight: float
    efficiency_weight: float
    tidiness_weight: float


V1 = Rubric("v1", 1.0, 0.3, 0.1)
V2_EFFICIENCY = Rubric("v2-efficiency", 1.0, 1.0, 0.5)
BUILTIN_RUBRICS = {r.name: r for r in (V1, V2_EFFICIENCY)}


def verified(trajectory: Trajectory) -> bool:
    return trajectory.answer == world_secret(trajectory.world_id)[1]


def judge_score(trajectory: Trajectory, rubric: Rubric) -> float:
    """The simulated LLM judge: weighted correctness, efficiency, tidiness plus seeded noise, to 3 places."""
    correct = 1.0 if verified(trajectory) else 0.0
    efficiency = max(0.0, 1 - (len(trajectory.turns) - 1) / 8)
    tidy = 1.0 if list(trajectory.files_written) == ["answer.txt"] else 0.0
    noise = rng("judge", trajectory.trial_id, rubric.name).uniform(-0.05, 0.05)
    weighted = rubric.correctness_weight * correct + rubric.efficiency_weight * efficiency
    return round(weighted + rubric.tidiness_weight * tidy + noise, 3)


@dataclass(frozen=True)
class Reward:
    trial_id: str
    world_id: str
    reward: float
    score: float
    turns: int
    found_doc: int | None


def reward_of(trajectory: Trajectory, rubric: Rubric) -> Reward:
    score = judge_score(trajectory, rubric)
    found = [turn.doc for turn in trajectory.turns if turn.found]
    return Reward(
        trial_id=trajectory.trial_id,
        world_id=trajectory.world_id,
        reward=round((1.0 if verified(trajectory) else 0.0) + score, 3),
        score=score,
        turns=len(trajectory.turns),
        found_doc=found[0] if found else None,
    )


# --- Trainer -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    version: int
    priors: dict[str, tuple[float, ...]]

    def identity(self) -> str:
        """What a rollout's identity includes of the policy: equal identities give equal rollouts."""
        return json.dumps([self.version, sorted(self.priors.items())])


def initial_policy(config: Config) -> Policy:
    return Policy(0, {w: (1.0,) * N_DOCS for w in config.world_ids})


def train_step(policy: Policy, batch: list[Reward], lr: float) -> Policy:
    """The bandit update over the batch sorted by trial id; the version goes up by one (even for no batch)."""
    priors = {w: list(p) for w, p in policy.priors.items()}
    for reward in sorted(batch, key=lambda r: r.trial_id):
        if reward.found_doc is not None and reward.reward > 0:
            priors[reward.world_id][reward.found_doc] += lr * reward.reward
    return Policy(policy.version + 1, {w: tuple(p) for w, p in priors.items()})


def step_batch(rewards: dict[str, Reward], config: Config, step: int, failed: frozenset[str]) -> list[Reward]:
    """The step's canonical batch: its rewards sorted by trial id, without failed trials (and their groups)."""
    left_out = set(failed)
    if config.failed_trial_policy == "mask-group":
        masked = {prompt_group(t) for t in failed}
        left_out |= {t for t in config.trial_ids(step) if prompt_group(t) in masked}
    return [rewards[t] for t in config.trial_ids(step) if t not in left_out and t in rewards]


def step_summary(batch: list[Reward]) -> tuple[float | None, float | None]:
    """``(mean reward to 3 places, mean turns to 2)`` over the batch; ``None`` for an empty batch."""
    if not batch:
        return None, None
    return round(sum(r.reward for r in batch) / len(batch), 3), round(sum(r.turns for r in batch) / len(batch), 2)


# --- Runs: training, re-scoring, forking ------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    step: int
    batch: list[Reward]
    mean_reward: float | None
    mean_turns: float | None
    version: int


@dataclass
class Run:
    """One chain: the trajectories it judged, its steps, its final policy, and what it cost."""

    config: Config
    rubric: Rubric
    failed: frozenset[str]
    trajectories: dict[str, Trajectory] = field(default_factory=dict)
    policies: list[Policy] = field(default_factory=list)
    """``policies[s]`` generated step ``s``; the last one is the final policy."""
    steps: list[StepResult] = field(default_factory=list)
    generated: int = 0
    reused: int = 0
    judge_calls: int = 0

    @property
    def policy(self) -> Policy:
        return self.policies[-1]

    def table(self) -> list[tuple[float | None, float | None, int]]:
        """``(mean reward, mean turns, trials in the batch)`` per step."""
        return [(s.mean_reward, s.mean_turns, len(s.batch)) for s in self.steps]

    def weights(self, places: int = 6) -> dict[str, list[float]]:
        return {w: [round(x, places) for x in p] for w, p in sorted(self.policy.priors.items())}


def _judge_and_train(run: Run, step: int, policy: Policy) -> Policy:
    rewards = {}
    for t in run.config.trial_ids(step):
        if t in run.trajectories and t not in run.failed:
            rewards[t] = reward_of(run.trajectories[t], run.rubric)
            run.judge_calls += 1
    batch = step_batch(rewards, run.config, step, run.failed)
    trained = train_step(policy, batch, run.config.lr)
    mean_reward, mean_turns = step_summary(batch)
    run.steps.append(StepResult(step, batch, mean_reward, mean_turns, trained.version))
    return trained


def _generate(config: Config, trial_id: str, policy: Policy) -> Trajectory:
    world = config.world_of(trial_id)
    fork = dict(world_documents(world))  # the trial's private fork; the world itself is never written
    return run_agent(trial_id, world, list(policy.priors[world]), config.max_turns, policy.version, fork)


def train(
    config: Config,
    rubric: Rubric = V1,
    failed: frozenset[str] = frozenset(),
    reuse_from: Run | None = None,
) -> Run:
    """Train ``config`` under ``rubric``; step ``s`` is generated with the policy after step ``s-1``.

    A trial in ``failed`` failed for good: it has no reward and is given no trajectory. (One that failed at
    judging did produce a trajectory; that would matter only to a later re-scoring of such a run, which the
    oracle does not model: :func:`rescore` leaves the parent's failed trials out.)
    With ``reuse_from``, a rollout is taken from that run instead of generated when its identity (trial id,
    world, policy) is the one it had there: that is a fork.
    """
    run = Run(config, rubric, failed, policies=[initial_policy(config)])
    for step in range(config.steps):
        policy = run.policy
        for t in config.trial_ids(step):
            if t in failed:
                continue
            if reuse_from is not None and _same_rollout(reuse_from, step, t, policy):
                run.trajectories[t] = reuse_from.trajectories[t]
                run.reused += 1
            else:
                run.trajectories[t] = _generate(config, t, policy)
                run.generated += 1
        run.policies.append(_judge_and_train(run, step, policy))
    return run


def _same_rollout(parent: Run, step: int, trial_id: str, policy: Policy) -> bool:
    return (
        trial_id in parent.trajectories
        and step < len(parent.policies)
        and parent.policies[step].identity() == policy.identity()
    )


def rescore(parent: Run, rubric: Rubric) -> Run:
    """Off-policy: the parent's trajectories judged under ``rubric`` and a second chain trained; nothing generated."""
    run = Run(parent.config, rubric, parent.failed, trajectories=dict(parent.trajectories))
    run.policies = [initial_policy(parent.config)]
    for step in range(parent.config.steps):
        run.policies.append(_judge_and_train(run, step, run.policy))
    return run


def fork(parent: Run, rubric: Rubric, failed: frozenset[str] = frozenset()) -> Run:
    """On-policy: a new chain under ``rubric`` reusing every parent rollout whose policy is unchanged."""
    return train(parent.config, rubric, failed, reuse_from=parent)


def with_policy(config: Config, policy: FailedTrialPolicy) -> Config:
    return replace(config, failed_trial_policy=policy)
