"""The asset graph: worlds and task_images -> trajectories -> rewards -> weights, with rubrics -> rewards.

The loop's back-edge (weights of step s-1 feed trajectories and weights of
step s) is not a Dagster dependency, because Dagster rejects cycles between
assets; it is loaded explicitly from the checkpoint store and pinned in
metadata (``policy_hash``, ``policy_version``), and the driver orders steps.

The package imports none of its modules: a command that needs only the partition keys
(``status``) loads no asset definitions.
"""
