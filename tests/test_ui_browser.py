"""The Dagster UI of a finished experiment, in a real browser: what a person opens, and what they must see.

``rl-assets dev`` serves the session's home once the reference experiment is trained; Debian's
Chromium, headless and driven by Selenium through Debian's chromedriver (given explicitly, so
Selenium never looks for or downloads a driver), first opens the login URL ``dev`` printed (the home's
UI token, read from its file as the owner can), as a person does, then opens the asset graph, the
partition grid of trajectories, one trial's transcript (rendered Markdown, compared with the recorded
metadata), each asset's Checks tab (its checks, each succeeded), and the launchpad of
``start_experiment_job`` with its typed defaults; without its cookie, the UI asks for the token and its
form lets the owner in. Every wait is an explicit condition on the page, with deadlines generous enough
for a loaded 2-core machine.

Chromium and chromedriver are system packages (``apt-get install -y chromium chromium-driver``): without
them every test here is skipped, with that reason, before the session's home is started; with
``RL_ASSETS_REQUIRE_BROWSER=1`` (or ``RL_ASSETS_REQUIRE_ALL=1``, for CI) their absence fails instead.

With ``RL_ASSETS_SCREENSHOTS=DIR`` each view is also saved as ``DIR/<view>.png``; docs/guides/ui.md's
pictures are made so: ``RL_ASSETS_SCREENSHOTS=docs/screenshots pytest tests/test_ui_browser.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from system_components import executable, require_component

from rl_assets.definitions import load_definitions
from rl_assets.driver.launchpad import StartExperimentConfig
from rl_assets.home.layout import Home
from rl_assets.home.services.dev_server import DevServer
from rl_assets.home.services.processes import free_loopback_port
from rl_assets.home.services.ui_auth import cookie_name, ensure_token, login_url
from rl_assets_testkit.expectations import train_json

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
BROWSER_INSTALL = "apt-get install -y chromium chromium-driver"
SCREENSHOTS_ENV = "RL_ASSETS_SCREENSHOTS"
UI_DEADLINE_S = 300.0
"""``rl-assets dev`` up and its code location loaded (it imports the whole code location twice)."""
WAIT_S = 90.0
"""One page element: the UI queries GraphQL, which reads Postgres, on a machine other tests load."""
WINDOW = (1600, 1000)

EXPERIMENT = "ref"
STEPS = [f"{EXPERIMENT}/s{s}" for s in range(3)]
TRIALS = [f"p{p}-n{n}" for p in range(3) for n in range(2)]
ASSETS = {"rubrics", "worlds", "task_images", "trajectories", "rewards", "weights"}


@pytest.fixture(scope="session", autouse=True)
def _browser_installed() -> None:
    """Chromium and chromedriver present, else skip (or fail, if required) every test here.

    Session-scoped and autouse, so pytest sets it up before the session's ``home`` (fixtures are set up widest
    scope first, autouse first within a scope): nothing is started for a browser that is not there.
    """
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not executable(path)]
    require_component("browser", not missing, BROWSER_INSTALL, detail="no " + " and no ".join(missing))


# --- the server ------------------------------------------------------------------------------------------------


def _graphql(base: str, token: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """A script's GraphQL request: the UI's token in its ``Authorization`` header."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"{base}/graphql", body, headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    assert "errors" not in answer, answer["errors"]
    return answer["data"]


def _loaded_repository(base: str, token: str) -> str | None:
    """The code location's repository as the UI's URLs name it (``repo@location``) once it has loaded, else None."""
    query = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
        locationOrLoadError { ... on RepositoryLocation { repositories { name } } } } } } }"""
    try:
        entries = _graphql(base, token, query)["workspaceOrError"]["locationEntries"]
    except OSError:
        return None
    loaded = [e for e in entries if e["loadStatus"] == "LOADED"]
    if not loaded:
        return None
    (entry,) = loaded
    (repository,) = entry["locationOrLoadError"]["repositories"]
    return f"{repository['name']}@{entry['name']}"


class UI:
    """A running UI: its address, its token and its code location's repository (which its URLs contain)."""

    def __init__(self, port: int, token: str, repository: str) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.repository = repository
        self.login_url = login_url("127.0.0.1", port, token)

    def url(self, path: str, **query: str) -> str:
        return f"{self.base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")


@pytest.fixture(scope="module")
def ui(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    """``rl-assets dev`` on the home, with the reference experiment finished (trained here unless it is already).

    The one place that starts the UI: a change to how ``rl-assets dev`` serves it is made here.
    """
    train_json(home, "--experiment", EXPERIMENT)
    port = free_loopback_port()
    base = f"http://127.0.0.1:{port}"
    token = ensure_token(Home(home))  # the home's UI token, which dev uses; its file is the owner's (ours)
    log = tmp_path_factory.mktemp("ui") / "dev.log"
    with log.open("w") as out:
        dev = subprocess.Popen(
            [sys.executable, "-m", "rl_assets.cli", "dev", "--home", str(home), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + UI_DEADLINE_S
        while (repository := _loaded_repository(base, token)) is None:
            assert dev.poll() is None, f"rl-assets dev exited {dev.returncode}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no loaded code location within {UI_DEADLINE_S:.0f} s"
            time.sleep(0.5)
        # What the UI's own "Skip" on its community dialog does; the dialog would cover the pages.
        assert _graphql(base, token, "mutation { setNuxSeen }") == {"setNuxSeen": True}
        assert login_url("127.0.0.1", port, token) in log.read_text(), "dev printed its login URL"
        yield UI(port, token, repository)
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGTERM)
            try:
                dev.wait(timeout=60)
            except subprocess.TimeoutExpired:
                dev.kill()
                dev.wait()
        DevServer(Home(home)).stop()


@pytest.fixture(scope="module")
def browser(ui: UI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """Chromium, logged in: it has opened the printed login URL, which set the UI's cookie.

    Its temporary files (its shared memory, with ``--disable-dev-shm-usage``) go to a directory of the
    session's (``TMPDIR``): Chromium leaves a ``/tmp/org.chromium.Chromium.*`` behind at every quit otherwise.
    """
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)  # no sandbox: the tests run as root, which Chromium's sandbox refuses
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    env = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER, env=env), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        log_in(driver, ui)
        yield driver
    finally:
        driver.quit()


# --- the page --------------------------------------------------------------------------------------------------


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    """``condition``'s first truthy value, failing with ``what`` (and the page's text) when it never comes."""
    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(condition)
    except TimeoutException as err:
        text = driver.find_element(By.TAG_NAME, "body").text[-2000:]
        raise AssertionError(f"{what} within {WAIT_S:.0f} s at {driver.current_url}; the page shows:\n{text}") from err


def log_in(driver: WebDriver, ui: UI) -> None:
    """Open the login URL: the UI sets its cookie (HttpOnly, SameSite=Strict) and drops the token from the address."""
    driver.get(ui.login_url)
    wait_for(driver, lambda d: d.current_url == f"{ui.base}/" or None, "the login URL redirected to the UI")
    cookie = driver.get_cookie(cookie_name(ui.port))
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    assert ui.token not in cookie["value"]


def present(xpath: str) -> Callable[[WebDriver], list[WebElement]]:
    return lambda driver: driver.find_elements(By.XPATH, xpath)


def text_literal(text: str) -> str:
    """``text`` as an XPath string literal (the names here hold no quotes)."""
    assert "'" not in text, text
    return f"'{text}'"


def screenshot(driver: WebDriver, view: str) -> None:
    """Save the view as ``$RL_ASSETS_SCREENSHOTS/<view>.png`` when that variable is set."""
    directory = os.environ.get(SCREENSHOTS_ENV)
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(Path(directory) / f"{view}.png"))


def green_dot(name: str) -> str:
    """A row of a partition list: its key, and the green dot that marks it materialized."""
    return (
        f"//div[@data-tooltip={text_literal(name)}]"
        "/following-sibling::div[contains(@style, 'border-radius') and contains(@style, 'accent-green')]"
    )


def check_names_shown(driver: WebDriver, ui: UI, asset: str) -> set[str]:
    """The asset checks the asset's Checks tab lists, once the tab has rendered (empty if it says none are defined)."""
    driver.get(ui.url(f"/assets/{asset}", view="checks"))
    header = wait_for(
        driver,
        present(
            "//*[starts-with(normalize-space(), 'Checks (') or normalize-space() = 'No checks defined for this asset']"
        ),
        f"the Checks tab of {asset}",
    )[-1]
    counted = re.fullmatch(r"Checks \((\d+)\)", header.text.strip())
    if counted is None:
        return set()
    # Each listed check is a name truncated in the middle to fit, with the full name as its title.
    not_checks = {"Assets", asset}
    return wait_for(
        driver,
        lambda d: (
            names
            if len(
                names := {e.get_attribute("title") for e in d.find_elements(By.XPATH, "//div[@title][span]")}
                - not_checks
            )
            >= int(counted.group(1))
            else None
        ),
        f"the {counted.group(1)} checks of {asset}",
    )


# --- what a person sees ----------------------------------------------------------------------------------------


def test_the_asset_graph_shows_the_six_assets(browser: WebDriver, ui: UI) -> None:
    browser.get(ui.url("/asset-groups"))
    # A node's name, whether the graph draws it in full or (zoomed out) as a name alone.
    names = "//*[local-name()='foreignObject']//div[contains(@class, 'AssetNode_assetName')]"
    for asset in sorted(ASSETS):
        wait_for(browser, present(f"{names}[normalize-space()={text_literal(asset)}]"), f"the graph's node {asset}")
    assert {e.text.strip() for e in browser.find_elements(By.XPATH, names)} == ASSETS
    loading = "//*[local-name()='foreignObject']//*[starts-with(normalize-space(text()), 'Loading')]"
    wait_for(browser, lambda d: not d.find_elements(By.XPATH, loading), "every node's status loaded")
    screenshot(browser, "graph")


def test_the_partition_grid_shows_every_trajectory_of_the_experiment_materialized(browser: WebDriver, ui: UI) -> None:
    browser.get(ui.url("/assets/trajectories", view="partitions"))
    for step in STEPS:
        wait_for(browser, present(green_dot(step)), f"step {step} materialized in the grid")
    browser.find_element(By.XPATH, f"//div[@data-tooltip={text_literal(STEPS[0])}]").click()
    for trial in TRIALS:
        wait_for(browser, present(green_dot(trial)), f"trial {trial} of {STEPS[0]} materialized in the grid")
    screenshot(browser, "partitions")


TRANSCRIPTS = """
query Transcripts($partitions: [String!]) {
  assetOrError(assetKey: {path: ["trajectories"]}) {
    ... on Asset {
      assetMaterializations(partitions: $partitions) {
        partition
        metadataEntries { label ... on MarkdownMetadataEntry { mdStr } }
      }
    }
  }
}
"""


def _transcripts(ui: UI) -> dict[str, str]:
    """Each of the experiment's trajectory partitions and its recorded ``transcript`` Markdown."""
    keys = [f"{step}|{trial}" for step in STEPS for trial in TRIALS]
    found = _graphql(ui.base, ui.token, TRANSCRIPTS, {"partitions": keys})["assetOrError"]["assetMaterializations"]
    return {m["partition"]: e["mdStr"] for m in found for e in m["metadataEntries"] if e["label"] == "transcript"}


def test_a_trajectory_shows_its_transcript_as_rendered_markdown(browser: WebDriver, ui: UI) -> None:
    transcripts = _transcripts(ui)
    assert len(transcripts) == len(STEPS) * len(TRIALS), sorted(transcripts)
    partition, markdown = max(transcripts.items(), key=lambda item: len(item[1]))  # the trial with the most turns
    browser.get(ui.url("/assets/trajectories", view="partitions", partition=partition))
    cell = "//td[normalize-space()='transcript']/following-sibling::td//div[contains(@class, 'dagster-markdown')]"
    rendered = wait_for(browser, present(cell), f"the transcript of {partition}")[0]
    # Markdown rendered, not shown raw: every `span` of the recorded text is a code element, in order.
    assert [c.text for c in rendered.find_elements(By.TAG_NAME, "code")] == re.findall(r"`([^`]+)`", markdown)
    assert "`" not in rendered.text and rendered.text.startswith("read docs/doc_")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", rendered)
    screenshot(browser, "transcript")


def passed_check(name: str) -> str:
    """A row of the Checks tab's list: the check's name, and under it the status of its latest evaluation."""
    return f"//div[@title={text_literal(name)}][span]/following-sibling::span[normalize-space()='Succeeded']"


def test_each_assets_checks_tab_lists_its_checks_each_succeeded(browser: WebDriver, ui: UI) -> None:
    graph = load_definitions().resolve_asset_graph()
    defined = {asset: {k.name for k in graph.asset_check_keys if k.asset_key == dg.AssetKey(asset)} for asset in ASSETS}
    with_checks = sorted(asset for asset, names in defined.items() if names)
    assert with_checks == ["rewards", "weights", "worlds"]
    for asset in with_checks:  # worlds last: its tab is docs/guides/ui.md's picture
        assert check_names_shown(browser, ui, asset) == defined[asset]
        for name in sorted(defined[asset]):
            wait_for(browser, present(passed_check(name)), f"the check {name} of {asset} shown as succeeded")
        screenshot(browser, "checks")


def _launchpad_config(driver: WebDriver) -> dict[str, Any] | None:
    """The launchpad editor's config once it holds the op's (the editor fills in as the job's schema loads)."""
    text = driver.execute_script(
        "const cm = document.querySelector('.CodeMirror'); return cm && cm.CodeMirror.getValue()"
    )
    config = yaml.safe_load(text) if text else None
    return config if isinstance(config, dict) and "start_experiment" in (config.get("ops") or {}) else None


def test_the_launchpad_of_start_experiment_job_opens_with_its_typed_defaults(browser: WebDriver, ui: UI) -> None:
    browser.get(ui.url(f"/locations/{ui.repository}/jobs/start_experiment_job/playground"))
    config = wait_for(browser, _launchpad_config, "the launchpad's editor holding the op's config")
    defaults = {
        name: field.default
        for name, field in StartExperimentConfig.model_fields.items()
        if not field.is_required() and field.default is not None
    }
    assert config["ops"]["start_experiment"]["config"] == defaults
    required = 'Missing required config entry "name" at path root:ops:start_experiment:config'
    wait_for(browser, present(f"//*[contains(text(), {text_literal(required)})]"), "the required name asked for")
    screenshot(browser, "launchpad")


def test_without_its_cookie_the_ui_asks_for_the_token_and_its_form_lets_the_owner_in(
    browser: WebDriver, ui: UI
) -> None:
    browser.delete_all_cookies()
    try:
        browser.get(ui.url("/asset-groups"))
        field = wait_for(browser, present("//form//input[@name='token']"), "the login form")[0]
        assert "Dagster" not in browser.title and not browser.find_elements(By.ID, "root")
        field.send_keys(ui.token)
        field.submit()
        wait_for(browser, lambda d: d.current_url == f"{ui.base}/" or None, "the form's token redirected to the UI")
        assert browser.get_cookie(cookie_name(ui.port)) is not None
        browser.get(ui.url("/asset-groups"))
        wait_for(browser, present("//*[local-name()='foreignObject']"), "the asset graph, once logged in")
    finally:
        if browser.get_cookie(cookie_name(ui.port)) is None:
            log_in(browser, ui)
