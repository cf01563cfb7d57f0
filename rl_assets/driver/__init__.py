"""The driver: what launches the graph's runs, and opens step s+1 when step s is trained.

- :mod:`.jobs` and :mod:`.deployment`: the units a run is made of, and the one switch between a local
  home and Kubernetes (executors, resources);
- :mod:`.planner`: reads Dagster's event log and the stores and says what is missing; it keeps no state
  of its own, so killing whatever acts on its plan loses nothing;
- :mod:`.sensor`, :mod:`.rubric_observer`, :mod:`.failure_watch`: the daemon's sensors that act on it, reading
  the Dagster instance :mod:`.tick_instance` keeps per code-server process;
- :mod:`.launchpad`: the jobs a person launches from the UI; :mod:`.audit`: the records checked before
  ``train`` lets the daemon drive them.
"""
