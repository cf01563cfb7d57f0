"""Helm post-renderer: give the Dagster webserver its own ServiceAccount.

The dagster/dagster chart (1.13) runs the webserver and the daemon under one
account (``dagster.serviceAccountName`` in both templates), but they need
different rights: the daemon launches run worker Jobs, the webserver only
terminates them (deploy/k8s/rbac.yaml). Helm pipes the rendered manifests
through this script (``--post-renderer .venv/bin/python --post-renderer-args
deploy/helm/post_render.py``); it sets the webserver Deployment's pod
``serviceAccountName`` to ``rl-assets-webserver`` and passes everything else
through unchanged. It exits 2 if the chart rendered no webserver Deployment,
so a chart change cannot silently leave the webserver on the daemon's account.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

WEBSERVER_COMPONENT = "dagster-webserver"
WEBSERVER_ACCOUNT = "rl-assets-webserver"


def _is_webserver(doc: dict[str, Any]) -> bool:
    if doc.get("kind") != "Deployment":
        return False
    labels = doc.get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {}
    return labels.get("component") == WEBSERVER_COMPONENT


def render(stream: str) -> str:
    """The manifests of ``stream`` with the webserver moved to its own account."""
    docs = [doc for doc in yaml.safe_load_all(stream) if doc]
    webservers = [doc for doc in docs if _is_webserver(doc)]
    if not webservers:
        raise LookupError(f"no Deployment with pod label component={WEBSERVER_COMPONENT} in the chart's output")
    for doc in webservers:
        doc["spec"]["template"]["spec"]["serviceAccountName"] = WEBSERVER_ACCOUNT
    return yaml.safe_dump_all(docs, sort_keys=False)


def main() -> int:
    try:
        sys.stdout.write(render(sys.stdin.read()))
    except LookupError as err:
        print(f"post_render: {err}", file=sys.stderr)
        return 2
    except yaml.YAMLError as err:  # its message quotes the input: name the problem only
        print(f"post_render: the chart's output is not YAML ({type(err).__name__})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
