"""What the run launcher's forkserver imports once: the code location, loaded, and the instance's storages.

Importing :mod:`rl_assets.definitions` builds nothing (its definitions load
lazily), so a forked worker would pay for loading them (0.6 s) on every run;
the forkserver imports this module instead, and every worker forked from it
starts with the definitions built. The same goes for the run and event-log
storages each worker's instance is built with (dagster-postgres, named in
``dagster.yaml`` through :mod:`rl_assets.instance.pooled_storage`): 0.3 s a run
when a worker imports them itself. And the model client (``openai`` and its chat resource,
which it imports on first use), that a run's trials calling a model would otherwise import in
their threads: 0.7 s of CPU a run of the task workload or of the LLM judge.
"""

import httpx  # noqa: F401  (imported for the forkserver, see above; openai imports its modules lazily)
import openai.resources.chat.chat  # noqa: F401
import openai.resources.chat.completions.completions  # noqa: F401

import rl_assets.instance.pooled_storage  # noqa: F401  (imported for the forkserver, see above)
from rl_assets.definitions import load_definitions

load_definitions()
