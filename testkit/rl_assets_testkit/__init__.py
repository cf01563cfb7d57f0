"""The test kit: what the tests and the benchmarks share, importable from both as ``rl_assets_testkit``.

A distribution of its own (``testkit/``), installed beside rl-assets by README.md's test command and never
part of the rl-assets wheel.

- :mod:`.oracle`: the reference workload's specification as code, standard library only, importing
  nothing of ``rl_assets`` (an import contract keeps it so): the numbers every run is checked against;
- :mod:`.expectations`: what ``train``, ``rescore`` and ``fork`` must print, from the oracle, and the CLI
  run as a user runs it;
- :mod:`.kills`: SIGKILL real processes of a ``train`` at points of durable progress, and audit what survived;
- :mod:`.samples`: sample records for the ledger tests;
- :mod:`.runs` and :mod:`.gated_launcher`: one run created and launched directly, and the home's run launcher
  with a gate that holds a worker once it has tagged its run (the race tests').

Nothing in ``rl_assets`` imports it (an import contract keeps it so).
"""
