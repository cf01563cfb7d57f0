"""What the run launcher's forkserver imports once: the code location, loaded.

Importing :mod:`rl_assets.definitions` builds nothing (its definitions load
lazily), so a forked worker would pay for loading them (0.6 s) on every run;
the forkserver imports this module instead, and every worker forked from it
starts with the definitions built.
"""

from rl_assets.definitions import load_definitions

load_definitions()
