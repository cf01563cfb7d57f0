"""What the records become for a person or another tool: the learning table (``results``), the evidence
(``report``, and its HTML page with ``plots``), and the trajectories exported for SkyRL (``skyrl_export``).

Read paths only: nothing here writes a record the loop depends on.
"""
