"""What the run launcher's forkserver imports once: the code location, loaded, and the instance's storages.

Importing :mod:`rl_assets.definitions` builds nothing (its definitions load
lazily), so a forked worker would pay for loading them (0.6 s) on every run;
the forkserver imports this module instead, and every worker forked from it
starts with the definitions built. The same goes for the run and event-log
storages each worker's instance is built with (dagster-postgres, named in
``dagster.yaml`` through :mod:`rl_assets.instance.pooled_storage`): 0.3 s a run
when a worker imports them itself. And the model client, whose modules load lazily as its
first client is built (httpx's transport): a run's trials calling a model (the task workload,
the LLM judge) imported them in their threads, 0.8 s of CPU a run.

Then everything built so far (about 260,000 objects: the modules, the definitions) is frozen
(:func:`gc.freeze`): the cycle collector no longer walks it on each full collection of every
worker, and does not write to its pages, which stay shared with the forkserver. A rollout
worker carrying 256 task trials made that many objects' worth of garbage often enough that the
walks were a quarter of its CPU (21 to 22 s against 15 to 16 s, two runs each, measured on its process).
"""

import gc

import rl_assets.instance.pooled_storage  # noqa: F401  (imported for the forkserver, see above)
from rl_assets.definitions import load_definitions
from rl_assets.workloads.harbor import client

load_definitions()
client.preload()
gc.collect()  # the garbage first: frozen, it would never be freed
gc.freeze()
