"""The ``rl-assets`` command: its commands (``commands``), what each checks of the machine before it records
anything (``preflight``, also ``rl-assets doctor``), and the progress a following command shows
(``progress_display``). ``python -m rl_assets.cli`` runs it as the installed script does."""
