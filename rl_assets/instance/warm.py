"""What the run launcher's forkserver imports once: the code location, loaded, and the instance's storages.

Importing :mod:`rl_assets.definitions` builds nothing (its definitions load
lazily), so a forked worker would pay for loading them (0.6 s) on every run;
the forkserver imports this module instead, and every worker forked from it
starts with the definitions built. The same goes for the run and event-log
storages each worker's instance is built with (dagster-postgres, named in
``dagster.yaml`` through :mod:`rl_assets.instance.pooled_storage`): 0.3 s a run
when a worker imports them itself. And the model client, whose modules load lazily as its
first client is built and used (``openai``'s chat resource, httpx's transport): a run's trials
calling a model (the task workload, the LLM judge) imported them in their threads, 0.8 s of CPU
a run.
"""

import rl_assets.instance.pooled_storage  # noqa: F401  (imported for the forkserver, see above)
from rl_assets.definitions import load_definitions
from rl_assets.workloads.harbor import client

load_definitions()
client.preload()
