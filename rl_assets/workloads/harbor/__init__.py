"""The chat workload for Harbor tasks: a tool-using agent and an LLM judge against OpenAI-compatible servers.

- :mod:`.client`: one chat completion (retries, token ids, answered-request counts);
- :mod:`.tools` and :mod:`.agent`: the agent's sandboxed tools and its loop, which records a
  :class:`~rl_assets.domain.transcripts.Transcript`;
- :mod:`.judge_rubric` and :mod:`.judge`: the judge's rubric file and its one scoring call;
- :mod:`.pricing`: what the calls cost.
"""
