"""The trial sandbox: one process per rollout attempt, on a private fork.

``launcher`` (the parent side, inside a Dagster step) starts ``runner`` in
fresh mount and network namespaces where the OS allows it: the fork is an
overlay mounted inside the sandbox's own mount namespace (so it vanishes with
the process, even on SIGKILL), and the sandbox has no network interface but
loopback. The runner only touches files through tools confined to its fork.
"""
