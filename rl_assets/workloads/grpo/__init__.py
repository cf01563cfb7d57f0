"""``--trainer grpo``: token-level GRPO on a causal LM, run in the trainer actor.

Torch and transformers (the ``llm`` extra) are imported inside the functions that need them, so nothing
here loads a framework until a grpo experiment trains: ``advantages``, ``tokenizer`` and ``samples`` are
plain Python; ``model``, ``loss`` and ``checkpoint`` hold the torch code; ``trainer`` is the seam.
"""
