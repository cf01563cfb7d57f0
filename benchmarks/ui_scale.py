"""The Dagster UI at scale: the asset graph, a partition grid, the weights plot and the runs page, in a browser.

``python benchmarks/ui_scale.py [--steps 1000] [--baseline-steps 10] [--trials 100] [--repeats 3] [--home DIR]
[--json]``

Two homes get an experiment's history written in bulk (:mod:`rl_assets_testkit.history`: every step trained but
the open one, ``--trials`` trial runs a step, each with its materialized reward, and a weights materialization a
step): a baseline of ``--baseline-steps`` steps and a large one of ``--steps`` steps (1,000 x 100: about 100k trial
runs). The history has no ``trajectories`` materializations (the bulk writer writes rewards and weights), so the
partition grid timed is that of ``rewards``, the other step x trial asset. ``rl-assets dev`` serves each home, and
Debian's Chromium, headless and driven by Selenium as ``tests/test_ui_browser.py`` drives it, opens each page; a
page's time runs from the navigation to its content on screen (explicit conditions on the page, no sleeps):

- ``graph``: the asset graph (``/asset-groups``), its five nodes drawn, the "% filled" of rewards and weights
  shown, and no node still loading;
- ``partitions``: ``/assets/rewards?view=partitions``, the grid's first step marked materialized and the
  "Materialized (N)" count shown;
- ``weights_plot``: ``/assets/weights`` (Overview), its Metadata section switched to Plots (Dagster 1.13 has no
  Plots tab: the plots are that toggle; by partition, they show the latest 120 steps), the ``mean_reward`` plot drawn;
- ``runs``: ``/runs``, the table's first rows shown (their "View" links).

Each page is opened once per home first (``cold``: the browser's first visit, the webserver's first read of that
history), then ``--repeats`` times per home, the homes alternating, so both are timed under the same load; the
medians and their ratio (large over baseline) are printed (``--json``: also every time, and what each page showed,
such as the materialized count). A page that does not render within ``--timeout`` seconds is reported as ``null``
(and named on stderr), not waited for. Without ``--home`` both homes are made under /tmp and removed at the end;
with it, ``DIR/baseline`` and ``DIR/large`` are built once and reused. Either way, every service the run started is
stopped at the end (``rl-assets stop``), on failure too; a home whose services are already running (another
process's) is refused, not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1600, 1000)
ASSETS = ("rubrics", "worlds", "trajectories", "rewards", "weights")
PAGES = ("graph", "partitions", "weights_plot", "runs")
UI_DEADLINE_S = 600.0
"""``rl-assets dev`` up, its code location loaded (it starts Postgres, a Ray head and the daemon first)."""
POLL_S = 0.05
BUILT = "ui-scale.json"
"""What a home built here holds, written once its history is: a home with it is reused."""


# --- the homes -------------------------------------------------------------------------------------------------


def build(home: Path, steps: int, trials: int) -> dict[str, Any]:
    """Write the history into ``home`` (its Postgres started here, left running); runs in a process of its own."""
    from dagster import DagsterInstance

    from rl_assets.domain.experiment import ExperimentConfig
    from rl_assets.domain.runtime import Runtime
    from rl_assets.home.layout import Home
    from rl_assets.home.services.local_deployment import LocalDeployment
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores
    from rl_assets_testkit.history import write_history

    deployment = LocalDeployment(Home(home))
    deployment.check()
    deployment.up(with_ray=False)
    config = ExperimentConfig(name=f"ui-{steps}x{trials}", steps=steps + 1, worlds=2, prompts=trials, samples=1)
    stores = Stores(home, Database.from_env())
    stores.experiments.create_or_resume(config, Runtime())
    start = time.perf_counter()
    with DagsterInstance.get() as instance:
        history = write_history(instance, stores, config, steps)
    built = {
        "experiment": config.name,
        "steps": steps,
        "trials": trials,
        "runs": history.runs,
        "written_s": round(time.perf_counter() - start, 1),
    }
    stores.db.close()
    (home / BUILT).write_text(json.dumps(built) + "\n")
    return built


def running_services(home: Path) -> list[str]:
    from rl_assets.home.layout import Home
    from rl_assets.home.services.local_deployment import LocalDeployment

    sessions = LocalDeployment(Home(home)).sessions()
    return [name for name, session in sessions.items() if session is not None and session.members()]


def ensure_built(home: Path, steps: int, trials: int) -> dict[str, Any]:
    """The home's history: written now (in a child process, whose environment is that home's) unless it is."""
    marker = home / BUILT
    if marker.exists():
        built = json.loads(marker.read_text())
        if (built["steps"], built["trials"]) != (steps, trials):
            raise SystemExit(f"{home} holds a {built['steps']} x {built['trials']} history, not {steps} x {trials}")
        return {**built, "reused": True}
    home.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--build", str(home), "--steps", str(steps), "--trials", str(trials)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL)
    return {**json.loads(marker.read_text()), "build_s": round(time.perf_counter() - start, 1)}


def stop_home(home: Path) -> None:
    """``rl-assets stop``: the home's dev server, daemon, Ray head and Postgres, each waited for."""
    cmd = [sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(home)]
    subprocess.run(cmd, check=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


# --- the UIs ---------------------------------------------------------------------------------------------------


def graphql(base: str, query: str, token: str) -> dict[str, Any]:
    """A GraphQL query to ``rl-assets dev``, which serves only callers with the home's UI token."""
    body = json.dumps({"query": query, "variables": {}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"{base}/graphql", body, headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.load(response)
    if "errors" in answer:
        raise RuntimeError(answer["errors"])
    return answer["data"]


def loaded(base: str, token: str) -> bool:
    query = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"
    try:
        entries = graphql(base, query, token)["workspaceOrError"]["locationEntries"]
    except OSError:
        return False
    return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)


class UI:
    """``rl-assets dev`` serving a home, started here."""

    def __init__(self, home: Path, log: Path) -> None:
        from rl_assets.home.layout import Home
        from rl_assets.home.services.processes import free_loopback_port
        from rl_assets.home.services.ui_auth import ensure_token

        self.home = home
        self.token = ensure_token(Home(home))
        self.port = free_loopback_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "rl_assets.cli", "dev", "--home", str(home), "--port", str(self.port)]
        with log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.log = log

    def wait_loaded(self, deadline: float) -> None:
        while not loaded(self.base, self.token):
            if self.proc.poll() is not None:
                raise RuntimeError(f"rl-assets dev exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no loaded code location at {self.base} within {UI_DEADLINE_S:.0f} s")
            time.sleep(0.5)
        # What the UI's own "Skip" on its community dialog does; the dialog would cover the pages.
        graphql(self.base, "mutation { setNuxSeen }", self.token)

    def login(self, driver: Any) -> None:
        """Open the login URL once: its cookie lets the browser see every page after it."""
        from rl_assets.home.services.ui_auth import login_url

        driver.get(login_url("127.0.0.1", self.port, self.token))

    def url(self, path: str, **query: str) -> str:
        return f"{self.base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")

    def run_count(self) -> int:
        return graphql(self.base, "{ runsOrError { ... on Runs { count } } }", self.token)["runsOrError"]["count"]

    def stop(self) -> None:
        from rl_assets.home.layout import Home
        from rl_assets.home.services.dev_server import DevServer

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        DevServer(Home(self.home)).stop()


def browser(timeout: float) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)  # no sandbox: run as root, which Chromium's sandbox refuses
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(timeout)
    return driver


# --- the pages -------------------------------------------------------------------------------------------------


def xpath(expression: str) -> Callable[[Any], Any]:
    from selenium.webdriver.common.by import By

    return lambda driver: driver.find_elements(By.XPATH, expression)


def literal(text: str) -> str:
    assert "'" not in text, text
    return f"'{text}'"


def asset_graph(driver: Any, ui: UI, experiment: str, until: Callable[..., Any]) -> str:
    driver.get(ui.url("/asset-groups"))
    node = "//*[local-name()='foreignObject'][.//div[contains(@class, 'AssetNode_assetName')][normalize-space()={}]]"
    for asset in ASSETS:
        until(xpath(node.format(literal(asset))), f"the graph's node {asset}")
    filled = {}
    for asset in ("rewards", "weights"):  # their partitions' status: what grows with the history
        found = until(xpath(node.format(literal(asset)) + "//*[contains(text(), '% filled')]"), f"{asset}'s status")
        filled[asset] = found[0].text.strip()
    still = "//*[local-name()='foreignObject']//*[starts-with(normalize-space(text()), 'Loading')]"
    until(lambda d: not xpath(still)(d), "every node's status loaded")
    return ", ".join(f"{asset} {text}" for asset, text in filled.items())


def partition_grid(driver: Any, ui: UI, experiment: str, until: Callable[..., Any]) -> str:
    driver.get(ui.url("/assets/rewards", view="partitions"))
    first = f"{experiment}/s0"
    dot = (
        f"//div[@data-tooltip={literal(first)}]"
        "/following-sibling::div[contains(@style, 'border-radius') and contains(@style, 'accent-green')]"
    )
    until(xpath(dot), f"step {first} materialized in the grid")
    counts = until(xpath("//*[starts-with(normalize-space(text()), 'Materialized (')]"), "the materialized count")
    return counts[0].text.strip()


def weights_plot(driver: Any, ui: UI, experiment: str, until: Callable[..., Any]) -> str:
    driver.get(ui.url("/assets/weights", view="overview"))
    until(xpath("//button[normalize-space()='Plots']"), "the Metadata section's Plots toggle")[0].click()
    plot = "//*[normalize-space(text())='mean_reward']/ancestor::div[.//canvas][1]//canvas"
    until(xpath(plot), "the mean_reward plot")
    return "mean_reward plotted"


def runs_page(driver: Any, ui: UI, experiment: str, until: Callable[..., Any]) -> str:
    driver.get(ui.url("/runs"))
    rows = until(xpath("//a[starts-with(@href, '/runs/') and normalize-space()='View']"), "the runs table's rows")
    return f"{len(rows)} rows"


VIEWS: dict[str, Callable[..., str]] = {
    "graph": asset_graph,
    "partitions": partition_grid,
    "weights_plot": weights_plot,
    "runs": runs_page,
}


def timed(driver: Any, view: str, ui: UI, experiment: str, timeout: float) -> tuple[float | None, str]:
    """Seconds from navigating to ``view`` to its content shown (None, and a line on stderr, if it never was),
    and what it showed."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    start = time.perf_counter()
    deadline = start + timeout

    def until(condition: Callable[[Any], Any], what: str) -> Any:
        left = max(deadline - time.perf_counter(), 0.001)
        try:
            return WebDriverWait(driver, left, poll_frequency=POLL_S).until(condition)
        except TimeoutException:
            raise TimeoutError(what) from None

    try:
        shown = VIEWS[view](driver, ui, experiment, until)
    except (TimeoutError, TimeoutException) as err:
        text = driver.find_element(By.TAG_NAME, "body").text[-600:].replace("\n", " | ")
        print(f"{view} of {ui.home.name}: no {err} within {timeout:.0f} s; the page shows: {text}", file=sys.stderr)
        return None, f"timeout: {err}"
    return time.perf_counter() - start, shown


def median(times: list[float | None]) -> float | None:
    """The median, or None if any repeat timed out (a page that sometimes never renders is not usable)."""
    return None if not times or None in times else round(statistics.median(times), 2)  # type: ignore[type-var]


def measure(args: argparse.Namespace, homes: dict[str, Path], built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="rl-assets-ui-scale-logs-", dir="/tmp"))
    uis: dict[str, UI] = {}
    driver = None
    try:
        for name, home in homes.items():
            uis[name] = UI(home, logs / f"dev-{name}.log")
        start = time.perf_counter()
        deadline = time.monotonic() + UI_DEADLINE_S
        for ui in uis.values():
            ui.wait_loaded(deadline)
        started_s = time.perf_counter() - start
        driver = browser(args.timeout)
        for ui in uis.values():  # a cookie per port: each UI is logged into once
            ui.login(driver)
        cold: dict[str, dict[str, float | None]] = {name: {} for name in homes}
        shown: dict[str, dict[str, str]] = {name: {} for name in homes}
        times: dict[str, dict[str, list[float | None]]] = {name: {view: [] for view in PAGES} for name in homes}
        for view in PAGES:
            for name, ui in uis.items():
                cold[name][view], shown[name][view] = timed(driver, view, ui, built[name]["experiment"], args.timeout)
        for _ in range(args.repeats):
            for view in PAGES:
                for name, ui in uis.items():
                    seconds, _ = timed(driver, view, ui, built[name]["experiment"], args.timeout)
                    times[name][view].append(seconds)
        medians = {name: {view: median(times[name][view]) for view in PAGES} for name in homes}
        ratio = {
            view: None
            if medians["baseline"][view] is None or medians["large"][view] is None
            else round(medians["large"][view] / medians["baseline"][view], 2)
            for view in PAGES
        }
        return {
            **medians,
            "ratio": ratio,
            "cold": {name: {v: None if t is None else round(t, 2) for v, t in cold[name].items()} for name in homes},
            "runs": {name: ui.run_count() for name, ui in uis.items()},
            "shown": shown,
            "times": {
                name: {v: [None if t is None else round(t, 2) for t in ts] for v, ts in times[name].items()}
                for name in homes
            },
            "steps": {name: built[name]["steps"] for name in homes},
            "trials": args.trials,
            "repeats": args.repeats,
            "ui_started_s": round(started_s, 1),
        }
    finally:
        if driver is not None:
            driver.quit()
        for ui in uis.values():
            ui.stop()
        shutil.rmtree(logs, ignore_errors=True)


def table(result: dict[str, Any]) -> str:
    def cell(seconds: float | None) -> str:
        return "timeout" if seconds is None else f"{seconds:.2f} s"

    lines = [
        f"runs in history: baseline {result['runs']['baseline']:,}, large {result['runs']['large']:,} "
        f"({result['steps']['large']} steps x {result['trials']} trials); medians of {result['repeats']}",
        f"{'page':<14}{'baseline':>10}{'large':>10}{'ratio':>8}{'cold baseline':>15}{'cold large':>12}",
    ]
    for view in PAGES:
        ratio = result["ratio"][view]
        lines.append(
            f"{view:<14}{cell(result['baseline'][view]):>10}{cell(result['large'][view]):>10}"
            f"{'-' if ratio is None else f'{ratio:.2f}x':>8}"
            f"{cell(result['cold']['baseline'][view]):>15}{cell(result['cold']['large'][view]):>12}"
        )
    lines.append("the large home showed: " + "; ".join(f"{v}: {t}" for v, t in result["shown"]["large"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000, help="trained steps of the large home (default 1000)")
    parser.add_argument("--baseline-steps", type=int, default=10, help="trained steps of the baseline (default 10)")
    parser.add_argument("--trials", type=int, default=100, help="trials a step (default 100)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a page gets to render (default 120)")
    parser.add_argument("--home", type=Path, help="DIR: homes DIR/baseline and DIR/large, built once and reused")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the child that writes one home's history
    args = parser.parse_args(argv)
    if args.build is not None:
        warnings.filterwarnings("ignore")  # Dagster's preview and beta notes on the definitions, once per home
        print(json.dumps(build(args.build, args.steps, args.trials)), file=sys.stderr)
        return 0
    root = args.home or Path(tempfile.mkdtemp(prefix="rl-assets-ui-scale-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the embedded Postgres runs as its own user when we are root
    homes = {"baseline": root / "baseline", "large": root / "large"}
    owned = {name: services for name, home in homes.items() if (services := running_services(home))}
    if owned:
        raise SystemExit(f"refusing homes whose services are running (another process's): {owned}")
    try:
        built = {}
        for name, steps in (("baseline", args.baseline_steps), ("large", args.steps)):
            built[name] = ensure_built(homes[name], steps, args.trials)
            print(f"{name}: {built[name]}", file=sys.stderr, flush=True)
        result = {**measure(args, homes, built), "built": built}
    finally:
        for home in homes.values():
            stop_home(home)
        if args.home is None:
            shutil.rmtree(root, ignore_errors=True)
    left = {name: services for name, home in homes.items() if home.exists() and (services := running_services(home))}
    if left:
        print(f"still running after rl-assets stop: {left}", file=sys.stderr)
    print(json.dumps(result) if args.json else table(result), flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    raise SystemExit(main())
