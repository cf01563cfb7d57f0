"""Workloads: the seams (:mod:`.seams`), the reference implementations (:mod:`.reference`) and the registry.

A new workload implements :class:`~rl_assets.workloads.seams.Agent`,
:class:`~rl_assets.workloads.seams.Judge` and
:class:`~rl_assets.workloads.seams.Trainer`, bundles them in a
:class:`~rl_assets.workloads.registry.Workload`, calls
:func:`~rl_assets.workloads.registry.register`, and is chosen with
``--workload NAME``.
"""
