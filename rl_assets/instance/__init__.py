"""What ``dagster.yaml`` names: the pieces of the Dagster instance rl-assets provides.

- :mod:`.run_launcher` and :mod:`.run_worker`: every run's worker forked from a warm forkserver
  (:mod:`.warm` is what it preloads);
- :mod:`.pooled_storage`: dagster-postgres's run and event-log storage with a connection pool per process;
- :mod:`.dagster_internals`: the one module that touches Dagster's unexported launcher API.
"""
