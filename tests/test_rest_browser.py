"""The dashboard in a real headless Chromium (Selenium) against a real cluster: Kafka Monitor,
Redis Monitor, a crawler and the Rest service as processes, the generated site on loopback.

Submit a crawl through the form, see it in the active crawls with a pending count, see the
throughput chart fill, set a throttle through the domain form, press Stop (confirm) and see the
crawl go; a hostile domain name is shown as text. A screenshot is saved under the test's tmp
dir (and copied to $SC_SCREENSHOT_TO when set).

``/docs`` (Swagger UI) in a Chromium that can reach nothing but 127.0.0.1: it lists the
operations, tries ``/poll``, loads nothing from anywhere but the Rest service and breaks none of
the page's policy.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from scrapy_cluster.crawler.common.response_stats import ResponseStats
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import REST_BROWSER
from tests.support.processes import Processes
from tests.support.rest import rest_process
from tests.support.services import ServiceUnavailable, free_port
from tests.support.starting import service_unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
HOSTS = REST_BROWSER.hosts(91, 92)
WAIT_S = 60
HOSTILE = '<img src=x onerror="window.pwned=1">.test'


def chromium(*arguments: str, capabilities: dict[str, Any] | None = None) -> Any:
    """Debian's headless Chromium under Selenium (never a downloaded browser)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        service_unavailable(ServiceUnavailable(
            "needs Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver)"))
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2350",
                     *arguments):
        options.add_argument(argument)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def offline_browser() -> Iterator[Any]:
    """A Chromium that can reach 127.0.0.1 and nothing else (a cluster without internet: every
    other host, named or not, fails to resolve), keeping its console and network logs. Every
    Content-Security-Policy violation of a page is also kept in ``window.cspViolations``."""
    driver = chromium("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                      capabilities={"goog:loggingPrefs": {"browser": "ALL",
                                                          "performance": "ALL"}})
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
            "window.cspViolations = [];"
            "document.addEventListener('securitypolicyviolation', event => "
            "window.cspViolations.push(event.violatedDirective + ' ' + event.blockedURI));")})
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def cluster(redis_client: redis.Redis, redis_url: str, tmp_path: Path
            ) -> Iterator[tuple[str, SiteServer]]:
    site = SiteServer(SiteConfig(hosts=HOSTS, pages_per_host=300, links_per_page=6),
                      free_port()).start()
    env = {"REDIS_URL": redis_url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": "uitest",
           "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "SCHEDULER_IP_ENABLED": "false",
           "PUBLIC_IP_URL": "http://127.0.0.1:1/", "SC_LOG_LEVEL": "WARNING",
           "LOG_LEVEL": "WARNING", "STATS_CYCLE": "1", "STATS_DUMP": "0",
           "QUEUE_HITS": "3", "QUEUE_WINDOW": "1", "DASHBOARD_REFRESH_S": "1",
           "REDIS_STREAM_LINGER_MS": "5"}
    processes = Processes(tmp_path)
    try:
        processes.start(env, "kafka-monitor", "run")
        processes.start(env, "redis-monitor")
        processes.start(env, "crawler", "--spider", "link")
        with rest_process(env, tmp_path / "rest.log") as (url, _):
            yield url, site
    finally:
        processes.stop_all()
        site.stop()


def wait_until(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """``condition`` true within WAIT_S; an element the dashboard re-rendered between finding
    it and reading it (every snapshot replaces the table rows) counts as "not yet"."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)
    except TimeoutException:
        messages = [item.text for item in driver.find_elements("css selector", ".message")]
        raise AssertionError(f"{what} not seen within {WAIT_S} s; messages: {messages}") from None


def crawl_row(driver: Any, crawlid: str) -> Any:
    rows = driver.find_elements("css selector", f'#crawls tr[data-crawlid="{crawlid}"]')
    return rows[0] if rows else None


def click_in_row(driver: Any, crawlid: str, selector: str) -> bool:
    """Click ``selector`` in the crawl's row; False while the row is not there (a re-render
    between finding and clicking raises StaleElementReferenceException: ``wait_until`` tries
    again)."""
    row = crawl_row(driver, crawlid)
    if row is None:
        return False
    row.find_element("css selector", selector).click()
    return True


def save_screenshot(driver: Any, tmp_path: Path) -> Path:
    path = tmp_path / "dashboard.png"
    driver.save_screenshot(str(path))
    target = os.environ.get("SC_SCREENSHOT_TO")
    if target:
        shutil.copyfile(path, target)
    return path


def test_submit_watch_throttle_and_stop_a_crawl_in_the_browser(
        cluster: tuple[str, SiteServer], browser: Any, redis_client: redis.Redis,
        redis_url: str, tmp_path: Path) -> None:
    # the cluster fixture comes first so the browser (and its event stream) goes first
    from selenium.webdriver.common.by import By

    url, site = cluster
    hostile = ResponseStats.from_settings(
        load_settings("crawler", environ={}, settings_file=None, overrides={
            "REDIS_URL": redis_url}), redis_client, hostname="other-host", spiderid="link")
    hostile.record(HOSTILE, 504)
    hostile.flush()

    browser.get(url + "/ui")
    wait_until(browser, lambda d: d.find_element(By.ID, "live").text == "live", "live badge")

    form = browser.find_element(By.ID, "crawl-form")
    form.find_element(By.NAME, "url").send_keys(site.site.url(HOSTS[0], "/p/0.html"))
    form.find_element(By.NAME, "crawlid").send_keys("ui-crawl-1")
    maxdepth = form.find_element(By.NAME, "maxdepth")
    maxdepth.clear()
    maxdepth.send_keys("3")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_until(browser, lambda d: "crawl ui-crawl-1 submitted" in d.find_element(
        By.ID, "messages").text, "the submitted message")

    def pending(driver: Any) -> int:
        row = crawl_row(driver, "ui-crawl-1")
        text = row.find_element(By.CSS_SELECTOR, "td.pending").text if row else ""
        return int(text.replace(",", "")) if text.replace(",", "").isdigit() else 0
    wait_until(browser, lambda d: pending(d) > 0, "the crawl with a pending count")
    wait_until(browser, lambda d: int(d.find_element(By.ID, "chart").get_attribute(
        "data-points") or 0) > 0, "crawled pages on the throughput chart")

    throttle = browser.find_element(By.ID, "throttle-form")
    throttle.find_element(By.NAME, "domain").send_keys(HOSTS[1])
    throttle.find_element(By.NAME, "hits").send_keys("2")
    throttle.find_element(By.NAME, "window").send_keys("1")
    throttle.find_element(By.CSS_SELECTOR, "button[value=domain-update]").click()
    wait_until(browser, lambda d: HOSTS[1] in d.find_element(By.ID, "throttles").text,
               "the new throttle in the domain configuration")

    assert HOSTILE in browser.find_element(By.ID, "errors-domain").text
    assert browser.execute_script("return window.pwned === undefined") is True
    assert browser.find_elements(By.CSS_SELECTOR, "#errors-domain img") == []
    save_screenshot(browser, tmp_path)

    wait_until(browser, lambda d: click_in_row(d, "ui-crawl-1", "button.funnel"), "the funnel button")
    wait_until(browser, lambda d: d.find_element(By.ID, "funnel").is_displayed()
               and "ui-crawl-1" in d.find_element(By.ID, "funnel-crawl").text, "the funnel")

    wait_until(browser, lambda d: click_in_row(d, "ui-crawl-1", "button.stop"), "the stop button")
    confirm = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                            "#crawls button.confirm-stop"),
                         "the confirm step")
    confirm[0].click()
    wait_until(browser, lambda d: "crawl ui-crawl-1 stopped" in d.find_element(
        By.ID, "messages").text, "the stop answer")
    wait_until(browser, lambda d: crawl_row(d, "ui-crawl-1") is None,
               "the stopped crawl gone from active crawls")
    assert browser.execute_script("return performance.getEntriesByType('navigation').length") \
        == 1  # no reload

    # /metrics after the crawl: pages by status as the site served them, nodes, latency.
    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(url + "/metrics", timeout=10).text
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(text) for sample in family.samples}

    def crawled_200(values: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
        return values.get(("scrapy_cluster_crawled_pages_total",
                           (("spider", "link"), ("status", "200"))), 0.0)

    def served() -> int:
        return sum(count for path, count in site.hits_snapshot().items()
                   if path.endswith(".html"))

    deadline = time.monotonic() + WAIT_S
    values = samples()
    while crawled_200(values) != served() and time.monotonic() < deadline:
        time.sleep(0.5)  # the crawler's stats flush runs every STATS_CYCLE
        values = samples()
    assert crawled_200(values) == served() > 0
    # the real crawler and the "other-host" stats source written above
    assert values[("scrapy_cluster_live_nodes", (("component", "crawler"),))] == 2
    assert values[("scrapy_cluster_live_nodes", (("component", "rest"),))] == 1
    assert values[("scrapy_cluster_enqueue_to_fetch_seconds_count", ())] == crawled_200(values)
    assert values[("scrapy_cluster_rest_feed_requests_total",
                   (("outcome", "accepted"), ("plugin", "ScraperHandler")))] == 1


def requested_urls(driver: Any) -> list[str]:
    """Every URL the page asked for, from Chromium's network log."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_api_docs_render_offline_within_their_policy(
        offline_browser: Any, redis_url: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    env = {"REDIS_URL": redis_url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": "docstest",
           "SC_LOG_LEVEL": "WARNING", "LOG_LEVEL": "WARNING"}
    with rest_process(env, tmp_path / "rest.log") as (url, _):
        offline_browser.get(url + "/docs")
        wait_until(offline_browser, lambda d: len(d.find_elements(
            By.CSS_SELECTOR, ".opblock .opblock-summary-path")) >= 5, "the operations")
        paths = {element.get_attribute("data-path") for element in
                 offline_browser.find_elements(By.CSS_SELECTOR,
                                               ".opblock .opblock-summary-path")}
        assert {"/", "/feed", "/poll", "/metrics"} <= paths
        assert [entry["message"] for entry in offline_browser.get_log("browser")
                if entry["level"] == "SEVERE"] == []
        # Try /poll from the page: its example poll id is answered 404 (not yet answered).
        offline_browser.find_element(By.ID, "operations-default-poll_poll_post").click()
        wait_until(offline_browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".try-out__btn"),
                   "the Try it out button")[0].click()
        wait_until(offline_browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".execute"),
                   "the Execute button")[0].click()
        wait_until(offline_browser, lambda d: "Could not find matching poll_id" in "".join(
            element.text for element in d.find_elements(By.CSS_SELECTOR, ".live-responses-table")),
                   "the answer of /poll")
        offline_browser.save_screenshot(str(tmp_path / "docs.png"))
        requested = requested_urls(offline_browser)
        assert url + "/docs/static/swagger-ui-bundle.js" in requested
        assert url + "/openapi.json" in requested
        assert [address for address in requested
                if not address.startswith((url + "/", "data:"))] == []
        assert offline_browser.execute_script("return window.cspViolations") == []
        assert [entry["message"] for entry in offline_browser.get_log("browser")
                if "Content Security Policy" in entry["message"]] == []
