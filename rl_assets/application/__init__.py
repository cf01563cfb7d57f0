"""What a user may ask of the home, whichever door they use: start, fork and re-score experiments.

The CLI, the launchpad and the sensors call the same functions here, so a
name is checked, a rubric resolved and a request recorded in one place, and
every refusal is one :class:`~rl_assets.application.experiments.Refused`
naming the input at fault. Each door only maps it: the CLI to its flag and
exit 2, the launchpad to a failed run that is not retried, a sensor to a log
line.
"""
