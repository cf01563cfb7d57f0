"""The SkyRL export's shape on stored chat batches, held to SkyRL's own validator (transcribed); no home needed.

The end-to-end export of a trained experiment, through the CLI, is in ``test_grpo_train.py``.
"""

from __future__ import annotations

import json

import pytest
from chat_checkpoints import BASH, CALLS_NOT_TEXT, CONTENT_ONLY, NATIVE_TOOLS, chat_tokenizer

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.views.skyrl_export import ExportError, skyrl_output
from rl_assets.workloads.grpo.tokenizer import ByteChatTokenizer
from rl_assets.workloads.grpo.trainer import SERVED_MODEL
from rl_assets.workloads.seams import TrainingWorkspace
from rl_assets_testkit.chat_batches import STEP_REWARDS, grpo_config, store_step
from rl_assets_testkit.skyrl_validator import validate_generator_output


def _trials(root, steps=range(2), **kw):
    workspace = TrainingWorkspace(root, "g")
    batches = [store_step(root, "g", step, STEP_REWARDS[step], **kw) for step in steps]
    return [(reward, workspace.trajectory(reward)) for batch in batches for reward in batch]


def _no_model_config() -> ExperimentConfig:
    """A task experiment of ``--trainer none``: no language model, so no tokenizer."""
    return grpo_config().with_changes(trainer="none", model=None, clip=None, micro_batch=None, lr=2.0)


def test_recorded_ids_export_with_their_logprobs_and_pass_skyrls_validator(tmp_path):
    trials = _trials(tmp_path, model=SERVED_MODEL, ids=True)
    output = skyrl_output(grpo_config(), trials)
    validate_generator_output(len(trials), output, step_wise=True)
    assert len(output["response_ids"]) == 2 * len(trials)  # two model calls a trial
    assert output["response_ids"][:2] == [list(b"ls"), list(b"yes")]  # the recorded ids, as they were
    assert output["rollout_logprobs"] == [[-5.5] * len(r) for r in output["response_ids"]]
    assert output["loss_masks"] == [[1] * len(r) for r in output["response_ids"]]
    assert output["trajectory_ids"][:2] == [{"instance_id": "s0-greet", "repetition_id": 0}] * 2
    assert output["is_last_step"][:4] == [False, True, False, True]
    finals = [r[-1] for r, last in zip(output["rewards"], output["is_last_step"], strict=True) if last]
    assert finals == [reward.reward for reward, _ in trials]
    assert sum(map(sum, output["rewards"])) == sum(reward.reward for reward, _ in trials)  # zero elsewhere


def test_another_servers_transcripts_are_retokenized_without_logprobs(tmp_path):
    trials = _trials(tmp_path, steps=[0], ids=True)  # the stand-in's ids: not this model's
    output = skyrl_output(grpo_config(), trials)
    validate_generator_output(len(trials), output, step_wise=True)
    assert output["rollout_logprobs"] is None
    assert output["response_ids"][1] == [*b"yes", 256 + 2]  # the byte tokenizer's, <|eos|> ending it
    tool = 256 + 6  # <|tool|>: tool output is in the second call's prompt, never in a response
    assert tool in output["prompt_token_ids"][1] and not any(tool in r for r in output["response_ids"])
    assert ByteChatTokenizer().vocab_size > max(max(p) for p in output["prompt_token_ids"])


def test_without_a_model_recorded_ids_export_and_missing_ones_are_refused(tmp_path):
    config = _no_model_config()
    output = skyrl_output(config, _trials(tmp_path / "ids", ids=True))
    assert output["response_ids"][0] == list(b"ls") and output["rollout_logprobs"] is not None
    with pytest.raises(ExportError, match=r"no language model .*: pass --tokenizer DIR") as err:
        skyrl_output(config, _trials(tmp_path / "none"))
    assert "\n" not in str(err.value)


def test_a_reference_experiment_is_refused():
    with pytest.raises(ExportError, match="runs the 'reference' workload"):
        skyrl_output(ExperimentConfig(name="bandit"), [])


@pytest.mark.parametrize(
    "damage",
    [
        lambda o: o["loss_masks"][0].pop(),  # a mask shorter than its response
        lambda o: o["rewards"][1].append(0.0),  # token rewards longer than their response
        lambda o: o["is_last_step"].__setitem__(1, False),  # a trajectory's end unmarked
        lambda o: o["trajectory_ids"].append(o["trajectory_ids"].pop(0)),  # its steps no longer adjacent
    ],
)
def test_the_transcribed_validator_refuses_what_skyrl_refuses(tmp_path, damage):
    trials = _trials(tmp_path, steps=[0], model=SERVED_MODEL, ids=True)
    output = skyrl_output(grpo_config(), trials)
    damage(output)
    with pytest.raises(AssertionError):
        validate_generator_output(len(trials), output, step_wise=True)


def _load(directory):
    from rl_assets.workloads.grpo.tokenizer import load_tokenizer

    return load_tokenizer(directory)


def test_a_template_without_tools_gets_them_as_hermes_blocks_and_a_system_message(tmp_path):
    trials = _trials(tmp_path / "store", steps=[0])  # llama.cpp's way: no token ids recorded
    checkpoint = chat_tokenizer(tmp_path / "smol", CONTENT_ONLY)
    output = skyrl_output(_no_model_config(), trials, checkpoint)
    validate_generator_output(len(trials), output, step_wise=True)
    tokenizer = _load(checkpoint)
    call = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call><|im_end|>\n'
    assert [tokenizer.decode(r) for r in output["response_ids"][:2]] == [call, "yes<|im_end|>\n"]
    assert call.removesuffix("<|im_end|>\n") in tokenizer.decode(output["prompt_token_ids"][1])
    assert output["rollout_logprobs"] is None
    (_, trajectory), *_ = trials
    prompt = tokenizer.decode(tokenizer.prompt_ids(trajectory.transcript.messages[:1], [BASH]))
    assert prompt.startswith("<|im_start|>system\nYou can call tools.") and json.dumps(BASH) in prompt


def test_a_template_with_tools_renders_them_itself(tmp_path):
    trials = _trials(tmp_path / "store", steps=[0])
    tokenizer = _load(chat_tokenizer(tmp_path / "qwenish", NATIVE_TOOLS))
    (_, trajectory), *_ = trials
    messages = trajectory.transcript.messages
    prompt = tokenizer.decode(tokenizer.prompt_ids(messages[:1], [BASH]))
    assert prompt.startswith("<|im_start|>system\nTOOLS [") and "You can call tools" not in prompt
    response = tokenizer.decode(tokenizer.response_ids(messages[:1], messages[1], [BASH]))
    assert response == '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call><|im_end|>\n'


def test_a_template_that_drops_an_answer_is_refused_naming_the_model_and_the_call(tmp_path):
    trials = _trials(tmp_path / "store", steps=[0])
    checkpoint = chat_tokenizer(tmp_path / "broken", CALLS_NOT_TEXT)
    with pytest.raises(ExportError) as err:
        skyrl_output(_no_model_config(), trials, checkpoint)
    message = str(err.value)
    assert f"the chat template of {checkpoint} drops the text of trajectory s0-greet-n0's model call 2" in message
    assert "(message 3): re-tokenized, its response is '<|im_end|>\\n'" in message
    assert "\n" not in message


def test_the_trainer_refuses_the_same_template(tmp_path):
    from rl_assets.workloads.grpo.samples import trajectory_samples

    ((_, trajectory), *_) = _trials(tmp_path / "store", steps=[0])
    tokenizer = _load(chat_tokenizer(tmp_path / "broken", CALLS_NOT_TEXT))
    with pytest.raises(ValueError, match="drops the text of trajectory s0-greet-n0"):
        trajectory_samples(trajectory, 1.0, tokenizer, SERVED_MODEL, 512)


def test_each_row_names_its_trial_and_how_the_agent_acted(tmp_path):
    output = skyrl_output(grpo_config(), _trials(tmp_path, steps=[0], model=SERVED_MODEL, ids=True))
    rows = output["env_metrics"]
    assert len(rows) == len(output["response_ids"])
    assert rows[:2] == [{"trial_id": "s0-greet-n0", "agent_protocol": "tools"}] * 2
