"""The home: one directory that holds an installation's state, the services that run on it, and the settings.

- :mod:`.layout`: where everything lives inside the home directory (``--home``, ``$RL_ASSETS_HOME``);
- :mod:`.services`: what ``rl-assets up`` starts and ``rl-assets stop`` ends (Postgres, Ray, the daemon,
  the UI) and the environment they share;
- :mod:`.settings`: every environment variable the package reads, in one validated model.
"""
