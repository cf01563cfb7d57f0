"""Background services a local home runs: an embedded Postgres, a Ray head, the daemon and the UI.

Both bind to loopback only, belong to one home, and are stopped by
``rl-assets stop``. On Kubernetes neither is used: Postgres and KubeRay are
configured through the environment instead.
"""
