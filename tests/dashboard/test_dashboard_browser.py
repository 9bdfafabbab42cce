"""The dashboard in a real browser: headless Chromium watches TPC-H query 18 run over two worker
processes, sees its SQL, its stages and their progress while it runs, then the query listed as
finished with its task table and plan; and the workers. Skipped, saying why, where Chromium
cannot be found or installed (see devtools/chromium.py).

With DASHBOARD_SCREENSHOTS=<folder> it saves a screenshot of each page there: the ones in
docs/images/ are made this way (`make screenshots`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events import DistributedHandler
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_query
from devtools import chromium

WAIT = 30.0  # seconds for anything the page should show
SHOT_HEIGHT = 1400  # pixels at most of a screenshot
PACE = 0.5  # seconds each task waits before it is sent, so the query runs long enough to watch


class Paced(DistributedHandler):
    """Holds each task back a moment before it is routed: the query runs for a few seconds
    whatever the machine, and a page polled every second sees it part done."""

    def route_task(self, request):
        time.sleep(PACE)
        return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    found = chromium.find_or_install()
    if isinstance(found, str):
        pytest.skip(found)
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found.browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--force-device-scale-factor=1", "--window-size=1100,800"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(found.driver))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, what: str):
    """`condition(driver)` once it is truthy, polled; fails naming `what` after WAIT seconds."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(
            driver, WAIT, poll_frequency=0.1, ignored_exceptions=(WebDriverException,)
        ).until(condition)
    except Exception as exc:
        raise AssertionError(f"the page did not show {what} within {WAIT:.0f}s") from exc


def _screenshot(driver, name: str) -> None:
    """The whole page (up to SHOT_HEIGHT pixels) as `name`.png, when DASHBOARD_SCREENSHOTS is set."""
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    page = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(
        width, min(SHOT_HEIGHT, page + (height - driver.execute_script("return window.innerHeight")))
    )
    try:
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))
    finally:
        driver.set_window_size(width, height)


def _attr(driver, selector: str, name: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.get_attribute(name) for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_the_dashboard_follows_a_tpch_query(browser, tpch_sf001, single_node_sf001) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    query = tpch_query(18)
    config = DistributedConfig(dashboard_port=0, bytes_per_partition=16 * 1024)
    with (
        LocalCluster(2) as cluster,
        DistributedContext(ctx, cluster, config=config, handlers=[Paced()]) as dctx,
    ):
        url = dctx.dashboard_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        dctx.sql(
            "SELECT n_name, count(*) AS suppliers FROM nation JOIN supplier ON s_nationkey = n_nationkey GROUP BY n_name"
        ).to_arrow_table()
        with pytest.raises(Exception, match="Cast error"):
            dctx.sql("SELECT CAST(n_name AS INT) FROM nation").to_arrow_table()
        result: dict = {}
        run = threading.Thread(target=lambda: result.update(table=dctx.sql(query).to_arrow_table()))
        run.start()
        try:
            driver.get(url)
            rows = _wait(
                driver,
                lambda d: d.find_elements(By.CSS_SELECTOR, "#queries-table tr[data-state=running]"),
                "the running query in the list",
            )
            failed = driver.find_element(By.CSS_SELECTOR, "#queries-table tr[data-state=failed]")
            assert "Cast error" in failed.text and "CAST(n_name AS INT)" in failed.text
            assert driver.find_elements(By.CSS_SELECTOR, "#queries-table tr[data-state=finished]")
            _screenshot(driver, "dashboard-queries-running")
            assert rows
            # clicked when found: the list is redrawn every second, so a row found earlier may be gone
            _wait(
                driver,
                lambda d: (
                    d.find_element(By.CSS_SELECTOR, "#queries-table tr[data-state=running]").click() or True
                ),
                "the running query to click on",
            )
            sql = _wait(driver, lambda d: d.find_element(By.ID, "query-sql").text, "the query's SQL")
            assert "lineitem" in sql and "having" in sql.lower()
            _wait(
                driver,
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#stage-graph g.stage")) >= 2,
                "the stages",
            )

            def progressed_while_running(d) -> bool:
                done = [int(n or 0) for n in _attr(d, "#stage-graph g.stage", "data-done")]
                running = d.find_elements(By.CSS_SELECTOR, "h1 .badge.running")
                return bool(running) and sum(done) > 0

            _wait(driver, progressed_while_running, "tasks done in the stage graph while the query runs")
            _screenshot(driver, "dashboard-query-running")
        finally:
            run.join(timeout=120)
        assert not run.is_alive() and "table" in result
        expected = single_node_sf001.sql(query).to_arrow_table()
        assert result["table"].num_rows == expected.num_rows

        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "h1 .badge.finished"), "the query finished")
        states = _attr(driver, "#stage-graph g.stage", "data-state")
        assert states and set(states) <= {"finished", "folded"}, states
        workers = set(_attr(driver, "#task-table tbody tr", "data-state"))
        assert workers == {"finished"}, workers
        task_workers = {
            e.text for e in driver.find_elements(By.CSS_SELECTOR, "#task-table tbody tr td:nth-child(5)")
        }
        assert set(cluster.get_urls()) & task_workers, task_workers
        plan = _wait(driver, lambda d: d.find_element(By.ID, "explain").text, "the analysed plan")
        assert "Stage" in plan and "metrics:" in plan
        _screenshot(driver, "dashboard-query")

        driver.get(url + "#/")
        _wait(
            driver,
            lambda d: d.find_elements(By.CSS_SELECTOR, "#queries-table tr[data-state=finished]"),
            "the query listed as finished",
        )
        _screenshot(driver, "dashboard-queries")

        driver.get(url + "#/workers")
        healths = _wait(
            driver,
            lambda d: (
                (h := _attr(d, "#workers-table tbody tr", "data-health")) and all(x == "ok" for x in h) and h
            ),
            "both workers answering",
        )
        assert sorted(_attr(driver, "#workers-table tbody tr", "data-url")) == sorted(cluster.get_urls())
        assert len(healths) == 2
        _screenshot(driver, "dashboard-workers")

        # a phone-sized window: nothing wider than the screen but the graph's and tables' own scroll
        driver.set_window_size(390, 844)
        driver.get(url + "#/")
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#queries-table tr[data-state]"), "the list")
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow}px wider than a phone's window"
        _wait(
            driver,
            lambda d: (
                d.find_element(By.CSS_SELECTOR, "#queries-table tr[data-state=finished]").click() or True
            ),
            "a finished query to click on",
        )
        _wait(
            driver,
            lambda d: d.find_elements(By.CSS_SELECTOR, "#stage-graph g.stage"),
            "the stages on a phone",
        )
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the query's page is {overflow}px wider than a phone's window"
        _screenshot(driver, "dashboard-phone")
        driver.set_window_size(1100, 800)
