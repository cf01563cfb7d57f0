"""The concurrency pools of the steps: rollouts, judge calls and training updates.

Each pool's limit is ``pools.default_limit`` in ``dagster.yaml`` unless set on its own
(``dagster instance concurrency set judge 4``).
"""

ROLLOUT = "rollout"
JUDGE = "judge"
TRAIN = "train"
POOLS = (ROLLOUT, JUDGE, TRAIN)
