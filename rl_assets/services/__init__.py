"""Background services a local home runs: an embedded Postgres and a Ray head.

Both bind to loopback only, belong to one home, and are stopped by
``rl-assets stop``. On Kubernetes neither is used: Postgres and KubeRay are
configured through the environment instead.
"""
