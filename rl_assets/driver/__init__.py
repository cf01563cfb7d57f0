"""The driver: opens step s+1 when step s is trained.

It keeps no state of its own. :mod:`.planner` reads Dagster's event log and
the stores and says what is missing; the CLI's driver process
(:mod:`.loop`) and the Dagster sensor (:mod:`.sensor`) both act on that plan,
so killing either loses nothing and the next one continues.
"""
