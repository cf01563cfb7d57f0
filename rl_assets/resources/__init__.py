"""Dagster resources: the seams between the asset graph and the outside world.

- :mod:`.stores`: the home's ledgers and artifacts (Postgres + files);
- :mod:`.world_store` (and :mod:`.k8s_world_store`): sealed worlds and copy-on-write forks;
- :mod:`.judge`: the judge, with its durable verdict ledger;
- :mod:`.trainer`: the policy in a detached, namespaced Ray actor;
- :mod:`.faults`: injected faults, wrapped around the seams they break.
"""
