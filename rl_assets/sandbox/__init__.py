"""The trial sandbox: one bubblewrap sandbox per rollout attempt, on a private fork.

``launcher`` (the trusted side, inside a Dagster step) has ``keeper`` forked for each attempt by the
process's ``zygote``; the keeper mounts the fork (an
overlay of the sealed world on a size-limited tmpfs) in its own namespaces and starts bubblewrap: the
rollout runs as an unprivileged uid in a user namespace, with no capability, a seccomp filter and a
minimal root holding only the interpreter and the agent's files. The launcher serves the agent's tool
calls and builds the trajectory from what it served and what the keeper finds in the fork. ``runner``
is the Kubernetes rollout pod's inside.
"""
