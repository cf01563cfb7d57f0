"""``python -m rl_assets.cli``: the ``rl-assets`` command."""

import sys

from rl_assets.cli.commands import main

sys.exit(main())
