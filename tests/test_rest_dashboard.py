"""The dashboard's snapshot against a real Redis written by the real components (frontier,
crawler response stats, heartbeats, domain config, pauses), and its HTTP endpoints served by
the real Rest service."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.api.validation import Accepted
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.model import DispatchView
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.rest.dashboard import tables
from scrapy_cluster.rest.dashboard.snapshot import SnapshotBuilder
from scrapy_cluster.settings import load_settings
from tests.support.cluster_state import Scene, request, settings_for

pytestmark = pytest.mark.integration

HOUR_S = 3600


@pytest.fixture
def scene(redis_client: redis.Redis, redis_url: str) -> Scene:
    return Scene(redis_client, settings_for(redis_url))


def rows_by_domain(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["domain"]: row for row in rows}


def test_domains_show_backlog_flight_rate_limit_state_and_why(scene: Scene) -> None:
    snapshot = SnapshotBuilder(scene.client, scene.frontier, scene.settings).build()
    rows = rows_by_domain(snapshot.domains)
    assert [row["domain"] for row in snapshot.domains] == ["a.test", "b.test", "c.test",
                                                           "d.test"]
    a = rows["a.test"]
    assert a["ready_in_ms"] > 0
    del a["ready_in_ms"]
    assert a == {"domain": "a.test", "backlog": 2, "spiders": {"link": 2}, "in_flight": 1,
                 "responses": 2, "rate_rps": round(2 / 60, 4),
                 "limit": {"hits": 10, "window_s": 60.0, "source": "default",
                           "rate_rps": 10 / 60},
                 "statuses": {"200": 2}, "errors": 0, "last_error": None, "state": "active",
                 "reason": None, "paused_until_ms": None, "blacklisted": False,
                 "bottleneck": "throttle_bound", "drain_s": 60.0}
    b = rows["b.test"]
    assert (b["backlog"], b["in_flight"], b["state"], b["bottleneck"], b["drain_s"]) == \
        (1, 1, "halted", "halted", None)
    c = rows["c.test"]
    assert c["ready_in_ms"] <= -10_000
    assert (c["backlog"], c["in_flight"], c["limit"], c["bottleneck"], c["drain_s"]) == \
        (1, 0, {"hits": 100, "window_s": 1.0, "source": "override", "rate_rps": 100.0},
         "worker_bound", None)
    d = rows["d.test"]
    assert (d["backlog"], d["responses"], d["statuses"], d["errors"], d["bottleneck"]) == \
        (0, 4, {"200": 3, "504": 1}, 1, "out_of_work")
    assert d["last_error"] == orjson.loads(scene.client.get(
        keys.crawler_domain_last_error("d.test")))


def test_active_crawls_carry_app_pending_expiry_and_funnel(scene: Scene) -> None:
    snapshot = SnapshotBuilder(scene.client, scene.frontier, scene.settings).build()
    funnels = [row.pop("funnel") for row in snapshot.crawls]
    assert snapshot.crawls == [
        {"spiderid": "link", "appid": "app-one", "crawlid": "c1", "pending": 2, "in_flight": 1,
         "domains": 1, "expires_s": 2_000_000_000, "scheduled": 0, "oldest_overdue_s": None, "not_modified_share": None},
        {"spiderid": "link", "appid": "app-two", "crawlid": "c2", "pending": 1, "in_flight": 1,
         "domains": 1, "expires_s": None, "scheduled": 0, "oldest_overdue_s": None, "not_modified_share": None},
        {"spiderid": "link", "appid": "app-three", "crawlid": "c3", "pending": 1,
         "in_flight": 0, "domains": 1, "expires_s": None, "scheduled": 0, "oldest_overdue_s": None, "not_modified_share": None},
    ]
    assert funnels == [tables.funnel(scene.client.hgetall(keys.crawl_funnel("link", crawlid)))
                       for crawlid in ("c1", "c2", "c3")]


def test_a_crawl_with_everything_in_flight_is_found_through_its_leases(
        redis_client: redis.Redis, redis_url: str) -> None:
    settings = settings_for(redis_url)
    frontier = Frontier.from_settings(settings, redis_client)
    frontier.enqueue_many([request("http://e.test/1", "c9", "app-nine")])
    assert len(frontier.pop(DispatchView("link"), 5).requests) == 1
    snapshot = SnapshotBuilder(redis_client, frontier, settings).build()
    assert [(row["appid"], row["crawlid"], row["pending"], row["in_flight"])
            for row in snapshot.crawls] == [("app-nine", "c9", 0, 1)]


def test_nodes_alive_offline_with_info_where_known(scene: Scene) -> None:
    builder = SnapshotBuilder(scene.client, scene.frontier, scene.settings)
    nodes = {(row["component"], row["member"]): row for row in builder.build().overview["nodes"]}
    assert set(nodes) == {("crawler", scene.crawler_member), ("kafka-monitor", "km-host:11-aa"),
                          ("kafka-monitor", "km-host:22-bb")}
    alive = nodes[("kafka-monitor", "km-host:11-aa")]
    assert {name: alive[name] for name in ("machine", "alive", "in_index", "version", "engine",
                                           "spiders", "cpu_percent", "rss_bytes")} == \
        {"machine": "km-host", "alive": True, "in_index": True, "version": "9.9",
         "engine": None, "spiders": None, "cpu_percent": 1.5, "rss_bytes": 2048}
    assert nodes[("kafka-monitor", "km-host:22-bb")]["alive"] is False
    assert nodes[("crawler", scene.crawler_member)]["spiders"] == ["link"]
    scene.client.zrem(keys.heartbeat_index("kafka-monitor"), "km-host:11-aa")
    gone = {row["member"]: row for row in builder.build().overview["nodes"]}["km-host:11-aa"]
    assert (gone["alive"], gone["in_index"], gone["version"]) == (False, False, "9.9")


def test_throughput_per_minute_by_status_cluster_wide_and_per_node(scene: Scene) -> None:
    overview = SnapshotBuilder(scene.client, scene.frontier, scene.settings).build().overview
    chart = overview["throughput"]
    assert (chart["bucket_s"], chart["window_s"], len(chart["times_s"])) == (60.0, HOUR_S, 60)
    assert {status: sum(series) for status, series in chart["statuses"].items()} == \
        {"200": 5, "504": 1}
    assert chart["statuses"]["200"][-1] + chart["statuses"]["200"][-2] == 5  # this minute
    assert chart["per_node"] == {"host-1": chart["statuses"]}


def test_errors_by_status_exception_and_domain(scene: Scene) -> None:
    errors = SnapshotBuilder(scene.client, scene.frontier, scene.settings).build() \
        .overview["errors"]
    assert errors == {"window_s": 60.0, "exceptions_window_s": HOUR_S,
                      "by_status": {"504": 1}, "by_exception": {"TimeoutError": 3},
                      "by_domain": [{"domain": "d.test", "errors": 1, "responses": 4,
                                     "statuses": {"504": 1}}]}


def test_summary_and_configuration(scene: Scene) -> None:
    overview = SnapshotBuilder(scene.client, scene.frontier, scene.settings).build().overview
    assert overview["summary"] == {"backlog": 4, "in_flight": 2, "domains": 4, "crawls": 3,
                                   "nodes_alive": 2, "nodes_offline": 1, "nodes_stopped": 0,
                                   "rate_rps": round(6 / 60, 4), "paused": 0, "halted": 1,
                                   "refused": {}, "filtered": {}, "unserved": {},
                                   "scheduled": 0, "overdue_crawls": 0, "oldest_overdue_s": 0.0}
    config = overview["config"]
    assert config["throttles"] == [{"domain": "c.test", "window": 1.0, "hits": 100,
                                    "scale": 1.0}]
    assert config["blacklist"] == []
    assert config["paused"] == [{"domain": "b.test", "state": "halted", "reason": None,
                                 "paused_until_ms": None}]


def test_the_funnel_of_one_crawl_groups_reasons_and_statuses(scene: Scene) -> None:
    scene.client.delete(keys.crawl_funnel("link", "c1"))
    scene.client.hset(keys.crawl_funnel("link", "c1"), mapping={
        "submitted": 1, "queued": 3, "filtered:offsite": 2, "filtered:robots": 1,
        "fetched:200": 1, "fetched:404": 2, "delivered": 1})
    builder = SnapshotBuilder(scene.client, scene.frontier, scene.settings)
    assert builder.funnel("link", "c1") == {
        "spiderid": "link", "crawlid": "c1", "pending": 2, "in_flight": 1, "domains": 1,
        "funnel": {"submitted": 1, "queued": 3, "filtered": {"offsite": 2, "robots": 1},
                   "fetched": {"200": 1, "404": 2}, "delivered": 1},
        "scheduled": 0, "not_modified_share": 0.0}


class CountingConnection(redis.Connection):
    """Counts writes to the server: one per command, one per pipeline (a round trip each)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def test_a_build_is_four_round_trips_without_scanning(scene: Scene, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, connection_class=CountingConnection)
    builder = SnapshotBuilder(client, Frontier.from_settings(scene.settings, client),
                              scene.settings)
    builder.build()  # loads the backlog script, learns the crawls' apps
    before_sent, before_stats = CountingConnection.sent, _calls(scene.client)
    builder.build()
    used = _calls(scene.client) - before_stats
    assert CountingConnection.sent - before_sent == 4
    assert used.get("keys", 0) == used.get("scan", 0) == 0
    assert used["lindex"] == 0  # apps are remembered, not read again


def _calls(client: redis.Redis) -> Counter[str]:
    return Counter({name.removeprefix("cmdstat_"): value["calls"]
                    for name, value in client.info("commandstats").items()})


# --- HTTP ------------------------------------------------------------------------------------

@pytest.fixture
def rest(redis_client: redis.Redis, redis_url: str) -> Iterator[str]:
    from tests.support.rest import running_rest

    with running_rest({"REDIS_URL": redis_url, "BUS_BACKEND": "redis",
                       "KAFKA_TOPIC_PREFIX": "dash", "DASHBOARD_REFRESH_S": 0.5}) as runner:
        yield runner.url


def test_the_page_and_its_static_files_are_served(rest: str) -> None:
    page = httpx.get(rest + "/ui")
    assert page.status_code == 200
    assert 'data-base="/ui"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(rest + "/ui/static/dashboard.js")
    assert (script.status_code, script.headers["content-type"].split(";")[0]) == \
        (200, "text/javascript")
    assert httpx.get(rest + "/ui/static/uPlot.iife.min.js").status_code == 200
    assert httpx.get(rest + "/ui/static/..%2Fsnapshot.py").status_code == 404
    form = httpx.get(rest + "/ui/static/crawl_form.js")
    assert (form.status_code, form.text) == (200, (STATIC / "crawl_form.js").read_text())
    assert page.text.index("/static/crawl_form.js") < page.text.index("/static/dashboard.js")
    for name in (*RECRAWL_INPUTS, *SITEMAP_INPUTS):
        assert f'name="{name}"' in page.text, name


# --- the crawl form's request (crawl_form.js, run in Node) -----------------------------------

STATIC = Path(tables.__file__).parent / "static"
RECRAWL_INPUTS = ("recrawl_interval", "recrawl_min", "recrawl_max", "recrawl_until_in",
                  "recrawl_max_cycles", "recrawl_links", "recrawl_not_modified", "recrawl_estimate")
SITEMAP_INPUTS = ("sitemaps", "sitemap_urls", "sitemap_any_host")
NOW_S = 1_900_000_000.5
FORM = {"url": " https://example.com/ ", "appid": "dashboard", "crawlid": "", "spiderid": "link",
        "maxdepth": "1", "priority": "5", "expires_in": "", "recrawl_interval": "",
        "recrawl_min": "", "recrawl_max": "", "recrawl_until_in": "", "recrawl_max_cycles": "",
        "recrawl_links": True, "recrawl_not_modified": "item", "recrawl_estimate": False,
        "sitemaps": "", "sitemap_urls": "", "sitemap_any_host": False}


def form_request(values: dict[str, Any]) -> Any:
    """What the form's script makes of ``values``: the request, or {"error": message}."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs Node.js to run the dashboard's form script")
    script = ("const {buildCrawlRequest} = require(process.argv[1]);"
              "const values = JSON.parse(process.argv[2]);"
              "let out; try { out = buildCrawlRequest(values, Number(process.argv[3]), "
              "() => 'generated-id'); } catch (error) { out = {error: error.message}; }"
              "process.stdout.write(JSON.stringify(out));")
    result = subprocess.run([node, "-e", script, str(STATIC / "crawl_form.js"),
                             orjson.dumps(values).decode(), str(NOW_S)],
                            capture_output=True, text=True, timeout=30, check=True)
    return orjson.loads(result.stdout)


CRAWL_ONLY = {"url": "https://example.com/", "appid": "dashboard", "crawlid": "generated-id",
              "spiderid": "link", "maxdepth": 1, "priority": 5}


@pytest.mark.parametrize(("inputs", "recrawl"), [
    ({}, None),
    ({"recrawl_interval": "3600"}, {"interval": 3600}),
    ({"recrawl_min": "60", "recrawl_max": "86400"}, {"adaptive": {"min": 60, "max": 86400}}),
    ({"recrawl_min": "60", "recrawl_max": "86400", "recrawl_estimate": True},
     {"adaptive": {"min": 60, "max": 86400, "estimate": True}}),
    ({"recrawl_interval": "600", "recrawl_min": "60", "recrawl_max": "3600",
      "recrawl_until_in": "7200", "recrawl_max_cycles": "10", "recrawl_links": False,
      "recrawl_not_modified": "none"},
     {"interval": 600, "adaptive": {"min": 60, "max": 3600}, "until": 1_900_007_200,
      "max_cycles": 10, "links": False, "not_modified": "none"}),
])
def test_the_crawl_form_adds_a_recrawl_only_when_one_is_asked_for(
        inputs: dict[str, Any], recrawl: dict[str, Any] | None) -> None:
    request = form_request({**FORM, **inputs})
    assert request == (CRAWL_ONLY if recrawl is None else {**CRAWL_ONLY, "recrawl": recrawl})
    settings = load_settings("kafka-monitor", environ={})
    match = build_validator(plugin_classes(settings), settings).match(request)
    assert isinstance(match, Accepted), match  # the API takes what the form sends


@pytest.mark.parametrize(("inputs", "error"), [
    ({"recrawl_max_cycles": "3"}, "re-crawl needs an interval or adaptive min and max"),
    ({"recrawl_links": False}, "re-crawl needs an interval or adaptive min and max"),
    ({"recrawl_interval": "60", "recrawl_estimate": True},
     "estimating change rates needs adaptive min and max"),
    ({"recrawl_min": "60"}, "adaptive re-crawl needs both min and max"),
])
def test_the_crawl_form_refuses_an_incomplete_recrawl(inputs: dict[str, Any], error: str) -> None:
    assert form_request({**FORM, **inputs}) == {"error": error}


@pytest.mark.parametrize(("inputs", "added"), [
    ({}, {}),
    ({"sitemaps": "robots"}, {"sitemaps": "robots"}),
    ({"sitemaps": "paths", "sitemap_any_host": True},
     {"sitemaps": "paths", "sitemap_any_host": True}),
    ({"sitemap_urls": " https://example.com/a.xml\n\nhttps://cdn.example.net/b.xml.gz "
                      "https://example.com/a.xml\n"},
     {"sitemaps": ["https://example.com/a.xml", "https://cdn.example.net/b.xml.gz"]}),
    ({"sitemap_urls": "\n  \n"}, {}),
])
def test_the_crawl_form_adds_sitemaps_only_when_asked_for(
        inputs: dict[str, Any], added: dict[str, Any]) -> None:
    request = form_request({**FORM, **inputs})
    assert request == {**CRAWL_ONLY, **added}
    settings = load_settings("kafka-monitor", environ={})
    match = build_validator(plugin_classes(settings), settings).match(request)
    assert isinstance(match, Accepted), match  # the API takes what the form sends


@pytest.mark.parametrize(("inputs", "error"), [
    ({"sitemaps": "robots", "sitemap_urls": "https://example.com/a.xml"},
     "give sitemap URLs or a sitemaps mode, not both"),
    ({"sitemap_urls": " ".join(f"https://example.com/{n}.xml" for n in range(101))},
     "at most 100 sitemap URLs"),
])
def test_the_crawl_form_refuses_conflicting_or_too_many_sitemaps(
        inputs: dict[str, Any], error: str) -> None:
    assert form_request({**FORM, **inputs}) == {"error": error}


def test_domains_are_paged_busiest_first(redis_client: redis.Redis, rest: str) -> None:
    Frontier.from_settings(settings_for("redis://unused"), redis_client).enqueue_many(
        [request(f"http://d{n}.test/{i}", "c1", "app") for n in range(3) for i in range(n + 1)])
    first = httpx.get(rest + "/ui/api/domains", params={"page": 1, "size": 2}).json()
    second = httpx.get(rest + "/ui/api/domains", params={"page": 2, "size": 2}).json()
    assert first["status"] == "SUCCESS"
    assert [(row["domain"], row["backlog"]) for row in first["data"]["rows"]] == \
        [("d2.test", 3), ("d1.test", 2)]
    assert [row["domain"] for row in second["data"]["rows"]] == ["d0.test"]
    assert (first["data"]["total"], first["data"]["page"], first["data"]["size"]) == (3, 1, 2)
    other = httpx.get(rest + "/ui/api/domains", params={"spider": "other"}).json()
    assert other["data"]["rows"] == []


def test_crawls_and_one_crawls_funnel(redis_client: redis.Redis, rest: str) -> None:
    Frontier.from_settings(settings_for("redis://unused"), redis_client).enqueue_many(
        [request("http://f.test/1", "c5", "app-five")])
    redis_client.hset(keys.crawl_funnel("link", "c5"), mapping={"submitted": 1, "queued": 1})
    crawls = httpx.get(rest + "/ui/api/crawls").json()["data"]
    assert [(row["appid"], row["crawlid"], row["pending"]) for row in crawls["rows"]] == \
        [("app-five", "c5", 1)]
    funnel = httpx.get(rest + "/ui/api/crawl/link/c5").json()["data"]
    assert funnel["funnel"] == {"submitted": 1, "queued": 1}


def first_event(client: httpx.Client, url: str) -> dict[str, Any]:
    """The first server-sent event of ``url``: its name and JSON data."""
    with client.stream("GET", url) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event: dict[str, str] = {}
        for line in response.iter_lines():
            if line.startswith("event: "):
                event["name"] = line[7:]
            elif line.startswith("data: "):
                event["data"] = line[6:]
            elif not line and "data" in event:
                return {"name": event["name"], **orjson.loads(event["data"])}
    raise AssertionError("the stream ended without an event")


def test_events_push_the_overview(rest: str) -> None:
    with httpx.Client(timeout=10) as client:
        event = first_event(client, rest + "/ui/events")
    assert event["name"] == "snapshot"
    assert set(event) == {"name", "summary", "nodes", "throughput", "errors", "config",
                          "spiders", "generated_at_ms", "refresh_s", "recrawl"}
    assert event["refresh_s"] == 0.5


def test_every_viewer_gets_the_one_snapshot_of_the_interval(redis_client: redis.Redis,
                                                            redis_url: str) -> None:
    from tests.support.rest import running_rest

    with running_rest({"REDIS_URL": redis_url, "BUS_BACKEND": "redis",
                       "KAFKA_TOPIC_PREFIX": "dash", "DASHBOARD_REFRESH_S": 300}) as runner:
        Frontier.from_settings(settings_for(redis_url), redis_client).backlog()  # loads it
        before = _calls(redis_client)
        with httpx.Client(timeout=10) as one, httpx.Client(timeout=10) as two:
            first = first_event(one, runner.url + "/ui/events")
            second = first_event(two, runner.url + "/ui/events")
            page = one.get(runner.url + "/ui/api/domains").json()["data"]
        builds = (_calls(redis_client) - before)["evalsha"]  # the backlog script, once a build
    assert first["generated_at_ms"] == second["generated_at_ms"] == page["generated_at_ms"]
    assert builds == 1


def test_login_sets_a_session_cookie_and_a_wrong_key_is_refused(redis_url: str) -> None:
    from tests.support.rest import running_rest

    key = "dashboard-key-5d0c7e2a"
    with running_rest({"REDIS_URL": redis_url, "BUS_BACKEND": "redis",
                       "KAFKA_TOPIC_PREFIX": "dash", "REST_API_KEYS": [key]}) as runner:
        with httpx.Client(base_url=runner.url) as client:
            assert client.get("/ui").status_code == 401
            form = client.get("/ui/login")
            assert form.status_code == 200 and 'name="key"' in form.text
            wrong = client.post("/ui/login", data={"key": "nope"})
            assert wrong.status_code == 401 and "not valid" in wrong.text
            right = client.post("/ui/login", data={"key": key})
            assert (right.status_code, right.headers["location"]) == (303, "/ui")
            cookie = right.headers["set-cookie"]
            assert cookie.startswith("sc_session=") and key not in cookie
            assert "HttpOnly" in cookie and "Max-Age=43200" in cookie
            assert "SameSite=strict" in cookie and "Path=/" in cookie
            assert client.get("/ui").status_code == 200
