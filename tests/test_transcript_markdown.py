"""What a person reads on a trajectory's materialization: the trial as Markdown, every field capped."""

from __future__ import annotations

from rl_assets.domain.models import VerifierOutcome
from rl_assets.domain.transcript_markdown import MESSAGE_CHARS, TOTAL_CHARS, transcript_markdown
from rl_assets.domain.transcripts import Message, ModelTurn, ToolCall, Transcript, Usage
from rl_assets_testkit.samples import sample_trajectory

SYSTEM = "the system prompt, which every trial shares"


def _chat(tool_output: str, turns: int = 1) -> Transcript:
    messages = [Message(role="system", content=SYSTEM), Message(role="user", content="Create greeting.txt")]
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="bash", arguments='{"command": "cat big.log"}')
        messages += [
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", content=tool_output, tool_call_id=f"c{i}"),
        ]
    usage = Usage(prompt_tokens=10, completion_tokens=3)
    return Transcript(
        model="policy",
        messages=tuple(messages),
        turns=(ModelTurn(message_index=2, finish_reason="tool_calls", usage=usage),),
        ended="max_turns",
        usage=usage,
    )


def test_a_chat_trial_shows_its_conversation_tool_calls_and_verifier_with_big_outputs_capped():
    trajectory = sample_trajectory().model_copy(
        update={
            "transcript": _chat("x" * 50_000 + "```the end"),
            "verifier": VerifierOutcome(reward=0.5, rewards={"reward": 0.5}, output="2 of 4 cases pass"),
        }
    )
    text = transcript_markdown(trajectory)
    assert "Create greeting.txt" in text and "calls `bash`" in text and "cat big.log" in text
    assert SYSTEM not in text, "the system prompt is the agent's, the same in every trial"
    assert "characters cut" in text and len(text) < MESSAGE_CHARS * 3
    assert "```the end" not in text, "output cannot close the fence it is shown in"
    assert "**verifier**: reward 0.5" in text and "2 of 4 cases pass" in text


def test_a_long_trial_is_capped_as_a_whole():
    trajectory = sample_trajectory().model_copy(update={"transcript": _chat("y" * 1500, turns=60)})
    text = transcript_markdown(trajectory)
    assert len(text) <= TOTAL_CHARS + 100 and "characters cut" in text
    assert text.startswith("model `policy`") and text.rstrip().endswith("```")


def test_a_reference_trial_shows_its_reads_and_answer():
    trajectory = sample_trajectory()
    text = transcript_markdown(trajectory)
    assert text.count("read `docs/doc_") == len(trajectory.turns)
    reads = [line for line in text.splitlines() if "read `docs/doc_" in line]
    assert [line.split(".", 1)[0] for line in reads] == [str(i) for i in range(1, len(reads) + 1)], "a numbered list"
    assert f"answer: `{trajectory.answer}`" in text
