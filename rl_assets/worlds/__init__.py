"""Worlds on this machine: sealed read-only trees, checked by their seals, forked per trial attempt.

- :mod:`.local`: the local world store (build, seal, verify, fork).

A world's generator is :mod:`rl_assets.domain.world`, its Dagster resource
:mod:`rl_assets.resources.world_store` (and the Kubernetes one beside it), its seal records
:mod:`rl_assets.stores.world_seals`, and its asset :mod:`rl_assets.assets.worlds`.
"""
