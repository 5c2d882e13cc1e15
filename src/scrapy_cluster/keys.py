"""Every Redis key name used by scrapy-cluster, built in one place.

Seed key names are kept exactly, because operators know them. Keys that are
new in scrapy-cluster are documented with their owner and lifetime in
``docs/architecture.md`` (section "Redis keys"). No other module formats a key.
"""

from __future__ import annotations

import time

from scrapy_cluster.text import as_text

# --- Crawl queues and filters (owner: frontier) ------------------------------

def domain_queue(spiderid: str, domain: str) -> str:
    """``<spiderid>:<domain>:queue`` — the domain's request queue."""
    return f"{spiderid}:{domain}:queue"


def dupefilter(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:dupefilter:<crawlid>`` — fingerprints seen by one crawl; TTL DUPEFILTER_TIMEOUT."""
    return f"{spiderid}:dupefilter:{crawlid}"


def crawl_blacklist(spiderid: str) -> str:
    """``<spiderid>:blacklist`` — crawlids that were stopped or expired, for
    CRAWL_BLACKLIST_TTL (``crawl_blacklist_since``); for ever when it is 0."""
    return f"{spiderid}:blacklist"


def crawl_blacklist_since(spiderid: str) -> str:
    """``<spiderid>:blacklist:since`` — ZSET crawlid -> ms it was blacklisted, so that the
    purge script trims ``crawl_blacklist`` members older than CRAWL_BLACKLIST_TTL."""
    return f"{spiderid}:blacklist:since"


def throttle_prefix(domain: str, *, spiderid: str | None, ip: str | None) -> str:
    """``<spiderid>:<ip>:<domain>`` with parts omitted by throttle style."""
    parts = [part for part in (spiderid, ip) if part]
    return ":".join([*parts, domain])


def throttle_window(domain: str, *, spiderid: str | None, ip: str | None) -> str:
    return throttle_prefix(domain, spiderid=spiderid, ip=ip) + ":throttle_window"


def throttle_time(domain: str, *, spiderid: str | None, ip: str | None) -> str:
    return throttle_prefix(domain, spiderid=spiderid, ip=ip) + ":throttle_time"


# Frontier keys discovered at run time (a domain chosen by a pop, a crawl named
# in a lease) reach the Lua scripts as *templates*: the builder below called
# with these placeholders. The scripts only substitute them, so every key name
# is still spelled here and nowhere else.
PLACEHOLDER_SPIDER = "\x01"
PLACEHOLDER_DOMAIN = "\x02"
PLACEHOLDER_PRIORITY = "\x03"
PLACEHOLDER_CRAWL = "\x04"
PLACEHOLDER_VIEW = "\x05"
PLACEHOLDER_APP = "\x06"
PLACEHOLDER_BUCKET = "\x07"


def domain_subqueue(spiderid: str, domain: str, priority: int | str, crawlid: str) -> str:
    """``<spiderid>:<domain>:queue:<priority>:<crawlid>`` — LIST of encoded requests, FIFO.

    Owner: frontier. One per (domain, priority, crawl); deleted when empty. The
    seed key ``<spiderid>:<domain>:queue`` is the ZSET index of these.
    """
    return f"{spiderid}:{domain}:queue:{priority}:{crawlid}"


def spider_domains(spiderid: str) -> str:
    """``<spiderid>:domains`` — ZSET of the spider's non-empty domains (frontier; until empty)."""
    return f"{spiderid}:domains"


def dispatch_ready(spiderid: str, view: str) -> str:
    """``<spiderid>:ready:<view>`` — ZSET domain -> next-allowed ms for one dispatch view.

    ``view`` is the crawler's public IP, or ``any`` when throttling is not per IP.
    Owner: frontier; dropped with its view after SCHEDULER_QUEUE_TIMEOUT idle.
    """
    return f"{spiderid}:ready:{view}"


def dispatch_views(spiderid: str) -> str:
    """``<spiderid>:views`` — ZSET view -> last pop ms (frontier; idle views pruned)."""
    return f"{spiderid}:views"


def enqueue_sequence(spiderid: str) -> str:
    """``<spiderid>:seq`` — STRING counter ordering a spider's requests (frontier; permanent)."""
    return f"{spiderid}:seq"


def wake_list(spiderid: str) -> str:
    """``<spiderid>:wake`` — LIST of wake tokens for idle crawlers (frontier; capped, TTL 60 s)."""
    return f"{spiderid}:wake"


def crawl_counts(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:counts`` — HASH ``<domain>|<priority>`` -> queued, ``~leased``.

    Owner: frontier; deleted when the crawl has nothing queued or leased.
    """
    return f"{spiderid}:crawl:{crawlid}:counts"


def crawl_held_upgrades(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:held`` — LIST of depth-upgraded requests of already fetched
    URLs (``<domain>\t<priority>\t<item>``), waiting until the crawl queues a page at its
    maxdepth. Owner: frontier; TTL DUPEFILTER_TIMEOUT."""
    return f"{spiderid}:crawl:{crawlid}:held"


def crawl_funnel(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:funnel`` — HASH of the crawl's URL funnel counters.

    Fields: ``submitted``, ``queued``, ``deduplicated``, ``filtered:<reason>``,
    ``fetched:<status>``, ``retried``, ``dropped``, ``delivered`` (see docs/api.md, "URL
    funnel"). Written inside existing round trips by the enqueue script (seeds from the Kafka
    Monitor and links from crawlers: submitted, queued, deduplicated, filtered:blacklisted,
    filtered:domain_blacklisted) and by each crawler's lease acknowledgement (the rest, carried
    by the ack script); read by ``info`` (``Frontier.crawl_funnels``), the complete notice and
    the dashboard. TTL DUPEFILTER_TIMEOUT while the crawl runs, renewed on every write; once it
    ended (complete, stop, expiry) CRAWL_STATE_TTL, with the crawl's state (``crawl_state``).
    """
    return f"{spiderid}:crawl:{crawlid}:funnel"


def crawl_state(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:state`` — HASH ``status`` (``running``, ``complete``,
    ``stopped``, ``expired``), ``appid``, ``started`` and ``finished`` (epoch ms).

    Owner: frontier (the enqueue script marks a crawl running; purge marks it stopped or
    expired; the complete script marks it complete). No TTL while running; CRAWL_STATE_TTL once
    it ended, and the crawl's funnel, dupefilter and held list expire with it.
    """
    return f"{spiderid}:crawl:{crawlid}:state"


def crawl_due_index(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:due`` — ZSET of the crawl's re-crawl buckets: member and
    score the bucket's due time (epoch ms, a multiple of FRONTIER_RECRAWL_BUCKET_MS).

    Owner: frontier (the ack script adds, the pop script takes due buckets, purge deletes).
    No TTL: it lives as long as the crawl schedules URLs (see docs/architecture.md,
    "Re-crawls")."""
    return f"{spiderid}:crawl:{crawlid}:due"


def crawl_due_bucket(spiderid: str, crawlid: str, bucket_ms: int | str) -> str:
    """``<spiderid>:crawl:<crawlid>:due:<bucket ms>`` — LIST of the URLs due in that bucket,
    each ``<tail id, 8 hex><state>\t<url as JSON string>`` (``\t<domain>\t<priority>\t<state>
    \t<item JSON>`` when its tail could not be shared). Owner: frontier; no TTL."""
    return f"{spiderid}:crawl:{crawlid}:due:{bucket_ms}"


def crawl_revisit_tails(spiderid: str, crawlid: str) -> str:
    """``<spiderid>:crawl:<crawlid>:tails`` — HASH tail id -> ``<domain>\t<priority>\t<item
    after its url>``: what the scheduled URLs of a crawl share (its fields, the depth), stored
    once. Owner: frontier; deleted with the crawl's schedule."""
    return f"{spiderid}:crawl:{crawlid}:tails"


def recrawl_due_crawls(spiderid: str) -> str:
    """``<spiderid>:recrawl`` — ZSET crawlid -> due time (epoch ms) of the crawl's earliest
    re-crawl bucket: the one read a pop makes to find due URLs, whatever their number.
    Owner: frontier; members leave when their crawl has nothing scheduled or is purged."""
    return f"{spiderid}:recrawl"


def crawls_idle() -> str:
    """``frontier:crawls:idle`` — ZSET ``<spiderid>\t<crawlid>`` -> epoch ms since which the
    crawl has had nothing queued and nothing leased (its count hash is empty).

    Written inside the enqueue, ack, release, reap and purge scripts (a crawl joins when its
    counts empty, leaves when it gets work again or is purged); read by the Redis Monitor's
    ``CompleteMonitor``, which re-scores a crawl it took until its notice is delivered. Members
    leave when completed, purged or running again; no TTL.
    """
    return "frontier:crawls:idle"


def app_crawls(spiderid: str, appid: str) -> str:
    """``<spiderid>:app:<appid>:crawls`` — SET of the app's crawlids with work (frontier)."""
    return f"{spiderid}:app:{appid}:crawls"


def frontier_spiders() -> str:
    """``frontier:spiders`` — SET of spiderids that ever enqueued (frontier; permanent)."""
    return "frontier:spiders"


def frontier_leases() -> str:
    """``frontier:leases`` — ZSET lease id -> deadline ms (frontier; until acked or reaped)."""
    return "frontier:leases"


def frontier_lease_items() -> str:
    """``frontier:lease_items`` — HASH lease id -> msgpack lease record (frontier)."""
    return "frontier:lease_items"


def frontier_lease_sequence() -> str:
    """``frontier:lease_seq`` — STRING counter of lease ids (frontier; permanent)."""
    return "frontier:lease_seq"


def domain_throttle_config() -> str:
    """``domain-config:throttle`` — HASH domain -> JSON ``{window, hits, scale}`` (domain config)."""
    return "domain-config:throttle"


def domain_blacklist() -> str:
    """``domain-config:blacklist`` — SET of blacklisted domains (domain config; permanent)."""
    return "domain-config:blacklist"


def domain_config_document() -> str:
    """``domain-config:document`` — HASH ``version``, ``yaml``: the operators' document
    (Redis backend of the domain config; permanent)."""
    return "domain-config:document"


def domain_config_changes() -> str:
    """``domain-config:changes`` — pub/sub channel: the new version after every write."""
    return "domain-config:changes"


def throttled_queue_window(queue_key: str) -> str:
    """``<queue key>:throttle_window`` — LIST of a RedisThrottledQueue's last pop ms; TTL 2 windows + 60 s."""
    return f"{queue_key}:throttle_window"


def throttled_queue_time(queue_key: str) -> str:
    """``<queue key>:throttle_time`` — a RedisThrottledQueue's last pop ms; TTL 2 windows + 60 s."""
    return f"{queue_key}:throttle_time"


def crawl_timeout(spiderid: str, appid: str, crawlid: str) -> str:
    """``timeout:<spiderid>:<appid>:<crawlid>`` — epoch seconds when the crawl expires."""
    return f"timeout:{spiderid}:{appid}:{crawlid}"


def parse_crawl_timeout(key: str) -> tuple[str, str, str] | None:
    """``(spiderid, appid, crawlid)`` of a ``crawl_timeout`` key (the crawlid may contain
    ``:``); None when ``key`` is not one (the original Scrapy Cluster's have the same shape)."""
    head, _, rest = key.partition(":")
    parts = rest.split(":", 2)
    if head != "timeout" or len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


# --- Schema version and migration (owner: migration) ---------------------------

def schema_version() -> str:
    """``scrapy-cluster:schema`` — STRING, the integer version of this key layout.

    Written when absent by ``scrapy-cluster migrate``, the Kafka Monitor and crawlers at start
    (SET NX); crawlers refuse to run against a version they do not know. Permanent.
    """
    return "scrapy-cluster:schema"


def migration_staging(legacy_key: str) -> str:
    """``migrate:src:<legacy key>`` — an original (1.2/1.3) queue ZSET or dupefilter SET moved
    aside (RENAME, or copied from another Redis) while ``migrate`` imports it; deleted when
    imported. No TTL (PERSISTed, so an interrupted migration loses nothing)."""
    return f"migrate:src:{legacy_key}"


def migration_copy(legacy_key: str) -> str:
    """``migrate:copy:<legacy key>`` — a staging copy being filled from another Redis; renamed
    to ``migration_staging`` once complete, deleted and redone if a run was interrupted."""
    return f"migrate:copy:{legacy_key}"


def is_migration_key(key: str) -> bool:
    """``key`` is one of ``migrate``'s own (``migrate:...``), never an original key to import."""
    return key.startswith("migrate:")


def migration_journal() -> str:
    """``migrate:journal`` — HASH ``<source>|<legacy key>`` -> items imported so far, or
    ``done``: what ``migrate`` finished, so a re-run resumes or skips. Permanent (small)."""
    return "migrate:journal"


def migration_rejected() -> str:
    """``migrate:rejected`` — LIST of JSON ``{key, priority, reason, item}``: original requests
    our schema refuses, kept for the operator. Permanent (delete it when handled)."""
    return "migrate:rejected"


# --- Message bus on Redis Streams (owner: bus) -----------------------------------

def bus_stream(topic: str) -> str:
    """``bus:stream:<topic>`` — STREAM holding one topic's messages (Redis Streams bus).

    Written by producers (XADD, trimmed to about REDIS_STREAM_MAXLEN entries),
    read by consumer groups; no TTL.
    """
    return f"bus:stream:{topic}"


def bus_topics() -> str:
    """``bus:topics`` — SET of topic names with a stream (owner: bus; no TTL); ``list-topics``."""
    return "bus:topics"


# --- Redis Monitor jobs (owner: kafka monitor writes, redis monitor reads) ----
#
# Each job key keeps the original shape and ends with the request's ``uuid``, so
# two requests for the same crawl never overwrite each other. The key holds the
# job's JSON (string, TTL REDIS_MONITOR_JOB_TTL); the Redis Monitor finds jobs
# through the ``redis-monitor:jobs`` stream, never by scanning.

def info_job(spiderid: str, appid: str, crawlid: str | None, uuid: str) -> str:
    """``info:<spiderid>:<appid>:<crawlid>:<uuid>`` (crawlid empty when absent); string, TTL."""
    return f"info:{spiderid}:{appid}:{crawlid or ''}:{uuid}"


def stop_job(spiderid: str, appid: str, crawlid: str | None, uuid: str) -> str:
    """``stop:<spiderid>:<appid>:<crawlid>:<uuid>`` (crawlid empty when absent); string, TTL."""
    return f"stop:{spiderid}:{appid}:{crawlid or ''}:{uuid}"


def stats_job(stats_type: str, appid: str, uuid: str) -> str:
    """``statsrequest:<stats-type>:<appid>:<uuid>``; string (job JSON), TTL."""
    return f"statsrequest:{stats_type}:{appid}:{uuid}"


def domain_config_job(action: str, domain: str, appid: str, uuid: str) -> str:
    """``zk:<action>:<domain>:<appid>:<uuid>``; string (job JSON), TTL."""
    return f"zk:{action}:{domain}:{appid}:{uuid}"


def redis_monitor_jobs() -> str:
    """``redis-monitor:jobs`` — stream index of job keys, entries ``{key, type, payload}``.

    Written by the Kafka Monitor (XADD, approximate MAXLEN REDIS_MONITOR_JOBS_MAXLEN),
    read by the Redis Monitor with a consumer group. Permanent.
    """
    return "redis-monitor:jobs"


def redis_monitor_taken() -> str:
    """``redis-monitor:taken`` — HASH job key -> stream entry id of the Redis Monitor handling it.

    Written when a monitor takes a job (its key is deleted at the same moment), removed when
    the job is answered or dropped; lets a monitor that claims a dead monitor's entry resume
    that job, and tells a duplicate entry of the same key to skip. Owner: redis monitor.
    """
    return "redis-monitor:taken"


def crawl_timeouts() -> str:
    """``redis-monitor:timeouts`` — sorted set of ``timeout:...`` keys scored by expiry (epoch s).

    Written by the Kafka Monitor with each expiring crawl; the Redis Monitor reads the
    due members (ZRANGEBYSCORE) and removes them when it expires the crawl. Permanent.
    """
    return "redis-monitor:timeouts"


# --- Stats (owner: stats collector) ---------------------------------------------

STATS = "stats"
"""The first part of every stats key."""


def stats_key(component: str, *parts: str | int) -> str:
    """``stats:<component>:<part>:...`` e.g. ``stats:kafka-monitor:total:3600``."""
    return ":".join([STATS, component, *map(str, parts)])


def heartbeat(component: str, machine: str, *parts: str) -> str:
    """``stats:<component>:self:<machine>[:<spiderid>]:<id>``; TTL HEARTBEAT_TIMEOUT."""
    return ":".join([STATS, component, "self", machine, *parts])


def heartbeat_index(component: str) -> str:
    """``stats:<component>:self`` — ZSET ``<machine>:<parts...>`` -> epoch s of its last heartbeat.

    Written beside every heartbeat key (same pipeline), so readers list a component's nodes
    without scanning; a process that stops cleanly removes its member, its heartbeat key and
    its info key at once; members older than HEARTBEAT_TIMEOUT are dead and removed (with
    their heartbeat keys) by the stats reader. Owner: stats.
    """
    return f"stats:{component}:self"


def heartbeat_member(machine: str, *parts: str) -> str:
    """A node's member in ``heartbeat_index``: ``<machine>:<parts...>`` (a crawler's parts are
    ``<spiderid>:<id>``, other components' ``<id>``)."""
    return ":".join([machine, *parts])


def heartbeat_of_member(component: str, member: str) -> str:
    """The ``heartbeat`` key of a ``heartbeat_index`` member: ``stats:<component>:self:<member>``."""
    return heartbeat(component, member)


def parse_heartbeat_member(member: str) -> tuple[str, str]:
    """``(machine, parts)`` of a ``heartbeat_member``: ``host-1:link:7`` -> ``("host-1",
    "link:7")`` (machine names have no ``:``)."""
    machine, _, parts = member.partition(":")
    return machine, parts


def crawler_member_spider(member: str) -> str | None:
    """The spiderid of a crawler's ``heartbeat_member`` (``<machine>:<spiderid>:<id>``)."""
    parts = member.split(":")
    return parts[1] if len(parts) >= 3 else None


def funnel_filtered_totals() -> str:
    """``stats:crawl-funnel:filtered`` — HASH ``<spiderid>:<reason>`` -> URLs of every crawl of
    the spider dropped with that reason over the cluster's lifetime: the ``filtered:<reason>``
    counts of the crawls' URL funnels (``crawl_funnel``) summed, written by the frontier
    scripts in the same call as each funnel count. Read by the progress line of ``up``, the
    dashboard and ``/metrics``. Owner: frontier; no TTL (one field per spider and reason).
    """
    return "stats:crawl-funnel:filtered"


def parse_funnel_filtered_field(field: bytes | str) -> tuple[str, str]:
    """``(spiderid, reason)`` of a ``funnel_filtered_totals`` field (reasons have no ``:``)."""
    spiderid, _, reason = as_text(field).rpartition(":")
    return spiderid, reason


def crawler_stats_sources() -> str:
    """``stats:crawler:_sources`` — SET of ``<hostname>:<spiderid>`` whose crawler stats exist.

    Written by each crawler's stats flush; the stats reader sums ``stats:crawler:<hostname>:
    <spiderid>:<status>:<window>`` over it instead of scanning. Owner: crawler; permanent.
    """
    return "stats:crawler:_sources"


def crawler_stats_source(hostname: str, spiderid: str) -> str:
    """A member of ``crawler_stats_sources``: ``<hostname>:<spiderid>``."""
    return f"{hostname}:{spiderid}"


def parse_crawler_stats_source(source: str) -> tuple[str, str] | None:
    """``(hostname, spiderid)`` of a ``crawler_stats_source`` (hostnames have no ``:``); None
    when ``source`` has no ``:``."""
    hostname, separator, spiderid = source.partition(":")
    return (hostname, spiderid) if separator else None


def crawler_stats(hostname: str, spiderid: str) -> str:
    """``stats:crawler:<hostname>:<spiderid>`` — the ``WindowedStats`` prefix of one crawler
    source: its responses counted by status (owner: crawler)."""
    return stats_key("crawler", hostname, spiderid)


def stats_component(key: str) -> str | None:
    """The ``<component>`` of a ``stats:<component>:...`` key or prefix (``stats_key``,
    ``heartbeat``, ``stats_name``...); None when ``key`` is not a stats key."""
    head, separator, rest = key.partition(":")
    return rest.split(":", 1)[0] if head == STATS and separator else None


def stats_name(key_prefix: str, *parts: str | int) -> str:
    """``<key_prefix>:<part>:...`` e.g. ``stats:kafka-monitor:total:900``.

    For ``WindowedStats`` (owner: stats): a rolling window is a HASH of time
    buckets with TTL window + 2 buckets; ``...:lifetime`` is a STRING counter
    with no TTL.
    """
    return ":".join([key_prefix, *map(str, parts)])


def stats_names_index(key_prefix: str) -> str:
    """``<key_prefix>:_names`` — SET of the stat names ever incremented (owner: stats; no TTL)."""
    return f"{key_prefix}:_names"


def stats_time_window(base: str, window_start_s: int) -> str:
    """``<base>:<YYYY-MM-DD_HH:MM:SS>`` (UTC window start) — one window of a rolling counter.

    Owner: stats counters with ``roll=True``; type depends on the counter
    (STRING, SET, HyperLogLog, bitmap); TTL (keep_max + 1) windows after it starts.
    """
    stamp = time.strftime("%Y-%m-%d_%H:%M:%S", time.gmtime(window_start_s))
    return f"{base}:{stamp}"


def rest_poll(uuid: str) -> str:
    """``rest:poll:<uuid>`` — STRING, the JSON answer to a request no Rest instance was still
    waiting for when it arrived; read by ``POST /poll`` on any instance. Owner: Rest service;
    TTL REST_POLL_TTL."""
    return f"rest:poll:{uuid}"


def node_info(component: str, member: str) -> str:
    """``stats:<component>:info:<member>`` — STRING JSON describing a live node: ``{version,
    engine, spiders, cpu_percent, rss_bytes, started}`` (fields a component cannot know are
    left out). ``member`` is the node's member in ``heartbeat_index``. Written with every
    heartbeat (same pipeline), same TTL. Read by the dashboard and ``/metrics``."""
    return f"stats:{component}:info:{member}"


def histogram(name: str) -> str:
    """``stats:histogram:<name>`` — HASH of a cluster-wide cumulative histogram
    (``stats.histogram.RedisHistogram``): one field per bucket upper bound, plus ``sum`` and
    ``count``. No TTL (Prometheus counters only grow); one key per histogram name."""
    return f"stats:histogram:{name}"


# --- Crawler (owner: crawler; read by the Redis Monitor's circuit breaker) ------

def crawler_domain_status_window(domain: str) -> str:
    """``crawler:domain_status:<domain>:window`` — ZSET ``<status>:<unique>`` scored by epoch ms.

    Every response status of the domain in the last CRAWLER_STATUS_WINDOW_S seconds; older
    members are trimmed on each write. TTL one day after the last write.
    """
    return f"crawler:domain_status:{domain}:window"


def crawler_domain_status_member(status: int, at_ms: int, writer: str, index: int) -> str:
    """A member of ``crawler_domain_status_window``: ``<status>:<at ms>:<writer>:<index>``
    (unique per response: the writing crawler's instance and the response's index in its
    flush)."""
    return f"{status}:{at_ms}:{writer}:{index}"


def crawler_domain_status_of_member(member: str) -> int | None:
    """The status of a ``crawler_domain_status_member``; None when it does not start with an
    integer."""
    head = member.split(":", 1)[0]
    return int(head) if head.lstrip("-").isdigit() else None


def crawler_domain_last_statuses(domain: str) -> str:
    """``crawler:domain_status:<domain>:last`` — LIST of the last CRAWLER_STATUS_LAST_N statuses,
    newest at the right (RPUSH + LTRIM). TTL one day after the last write."""
    return f"crawler:domain_status:{domain}:last"


# --- Circuit breaker and domain pauses (owners named per key) ---------------------

def domain_paused() -> str:
    """``domain-config:paused`` — HASH domain -> epoch ms until which no crawler dispatches it.

    Written by the Redis Monitor's circuit breaker (pause, halt) and by crawlers on a 429/503
    ``Retry-After`` (``lua/domain_pause.lua``: only ever later); read by the frontier's pop.
    A halt is ``frontier.pause.HALT_UNTIL_MS`` (2^50 ms, i.e. never). An entry leaves on
    resume, or at the first pop that finds it over. No TTL.
    """
    return "domain-config:paused"


def crawler_domain_last_error(domain: str) -> str:
    """``crawler:domain_status:<domain>:last_error`` — STRING JSON ``{at_ms, status, error,
    url}`` of the domain's most recent failed request (an error status or an exception).
    Written with the status flush; TTL one day after the last write."""
    return f"crawler:domain_status:{domain}:last_error"


def crawler_error_stats() -> str:
    """``stats:crawler-errors`` — ``WindowedStats`` prefix counting failed downloads by
    exception type (names are exception class names, e.g. ``DownloadTimeoutError``),
    cluster-wide. Owner: crawler (status flush)."""
    return "stats:crawler-errors"


def crawler_domain_status_domains() -> str:
    """``crawler:domain_status:domains`` — ZSET domain -> epoch ms of its last status write.

    Index of the domains with ``crawler:domain_status:<domain>:*`` keys, so the circuit
    breaker never scans. Owner: crawler (with every status flush); members older than one day
    are trimmed then, and the key expires one day after the last write.
    """
    return "crawler:domain_status:domains"


def circuit_breaker_state() -> str:
    """``circuit-breaker:state`` — HASH domain -> JSON ``{state, since_ms, until_ms, reason,
    errors, responses}`` of each paused or halted domain.

    Owner: Redis Monitor (circuit breaker). An entry leaves when its pause is over or the
    domain is resumed. No TTL.
    """
    return "circuit-breaker:state"


def circuit_breaker_counted_from() -> str:
    """``circuit-breaker:counted-from`` — ZSET domain -> epoch ms from which its statuses count.

    Set when a pause ends or a domain is resumed, so errors from before are not counted again.
    Owner: Redis Monitor (circuit breaker); members older than CRAWLER_STATUS_WINDOW_S are
    trimmed by every evaluation. No TTL.
    """
    return "circuit-breaker:counted-from"
