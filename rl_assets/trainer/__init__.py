"""Training, below the ``weights`` asset: the step's canonical batch (``batches``) and the detached Ray actor
that applies it (``actor``). The exactly-once protocol around the actor is the trainer resource's
(:mod:`rl_assets.resources.trainer`); the update itself is the workload's (:mod:`rl_assets.workloads`).
"""
