"""The reference workload, free of any orchestration.

Everything here is plain Python and pydantic: the models that cross process
boundaries, and the seeded agent, world, verifier, judge and bandit of
``docs/reference-workload.md``. Dagster, Ray and the stores import this package;
it imports none of them, so the workload can be read, tested and replaced on
its own. :mod:`rl_assets.workloads` wraps it as the ``reference`` workload
behind the seams (:mod:`rl_assets.workloads.seams`) where a real agent,
judge and trainer plug in.
"""
