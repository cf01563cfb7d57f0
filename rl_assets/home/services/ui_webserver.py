"""The process ``rl-assets dev`` runs: Dagster's webserver app, behind :class:`~.ui_auth.TokenGate`.

What ``dagster-webserver -w WORKSPACE -h HOST -p PORT`` does (the instance, tuned for a long-running server;
the workspace's process context, which starts and ends the code servers; Dagster's Starlette app served by
uvicorn), with one difference: the app uvicorn serves is Dagster's wrapped in the token gate, so the only
socket listening is one on which every request is checked before Dagster sees it. Dagster's own app never
listens anywhere.

The token is read from the file named on the command line (the file is the owner's, 0600; the token itself
is never in an argument, which any user can read in ``/proc``). SIGINT and SIGTERM both end it the way
Ctrl-C ends ``dagster-webserver``: uvicorn stops serving, then the process context shuts its code servers down.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType

from rl_assets.home.services.ui_auth import TokenGate, read_token

LOGGER = "dagster.rl_assets_dev"
"""Under the logger dagster configures (its colored lines on stderr), like the webserver's own."""
SHUTDOWN_TIMEOUT_S = 5
"""How long open connections (the browser's GraphQL websockets) may hold up uvicorn's shutdown."""
# What dagster-webserver's CLI uses by default.
DB_STATEMENT_TIMEOUT_MS = 15000
DB_POOL_RECYCLE_S = 3600
DB_POOL_MAX_OVERFLOW = 20


@contextlib.asynccontextmanager
async def _lifespan(app: object) -> AsyncIterator[None]:
    # As dagster-webserver's: uvicorn cancels the lifespan on Ctrl-C, which is how it is meant to end.
    with contextlib.suppress(asyncio.CancelledError):
        yield


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve(workspace: Path, host: str, port: int, token: str) -> None:
    import uvicorn
    from dagster import DagsterInstance
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._utils.log import configure_loggers
    from dagster_webserver.app import create_app_from_workspace_process_context
    from dagster_webserver.version import __version__

    configure_loggers(formatter="colored", log_level="INFO")
    with DagsterInstance.get() as instance:
        instance.optimize_for_webserver(DB_STATEMENT_TIMEOUT_MS, DB_POOL_RECYCLE_S, DB_POOL_MAX_OVERFLOW)
        with WorkspaceProcessContext(
            instance,
            version=__version__,
            read_only=False,
            workspace_load_target=WorkspaceFileTarget(paths=[str(workspace)]),
        ) as context:
            app = create_app_from_workspace_process_context(context, "", None, lifespan=_lifespan)
            logging.getLogger(LOGGER).info("serving the Dagster UI on %s:%d, behind its token", host, port)
            uvicorn.run(
                TokenGate(app, token, port),
                host=host,
                port=port,
                log_level="warning",
                timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_assets.home.services.ui_webserver")
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args(argv)
    # uvicorn handles SIGTERM while it serves, then raises it again: this turns it into Ctrl-C's path, so
    # the process context still ends the code servers (a default SIGTERM would skip every `with` exit).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        token = read_token(args.token_file)
    except OSError as err:
        print(f"rl-assets dev: cannot read the UI's token: {err}", file=sys.stderr)
        return 2
    try:
        serve(args.workspace, args.host, args.port, token)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
