"""Built-in defaults for every setting, with the component(s) that read it.

This module is the single source of truth: ``docs/settings.md`` is generated
from it (``scrapy-cluster settings --markdown``) and a test keeps the two in
step. Names and defaults follow the original Scrapy Cluster 1.2 settings pages;
where a component's original default differs from another component's (for
example ``SLEEP_TIME``), the per-component value lives in ``COMPONENT_DEFAULTS``.
Changed defaults say why in their description.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version as _package_version
from typing import Any

ALL_COMPONENTS = ("kafka-monitor", "crawler", "redis-monitor", "rest")


@dataclass(frozen=True)
class SettingSpec:
    name: str
    default: Any
    doc: str
    section: str
    components: tuple[str, ...] = ALL_COMPONENTS


SPECS: list[SettingSpec] = []


def _declare(section: str, name: str, default: Any, doc: str,
             components: tuple[str, ...] = ALL_COMPONENTS) -> None:
    SPECS.append(SettingSpec(name, default, doc, section, components))


KM, CR, RM, REST = "kafka-monitor", "crawler", "redis-monitor", "rest"
STATS_WINDOWS = [
    "SECONDS_15_MINUTE", "SECONDS_1_HOUR", "SECONDS_6_HOUR",
    "SECONDS_12_HOUR", "SECONDS_1_DAY", "SECONDS_1_WEEK",
]

# --- Core ---------------------------------------------------------------
_declare("Core", "SLEEP_TIME", 0.1,
         "Seconds a component's main loop waits when it found nothing to do. "
         "Kafka Monitor default 0.01. Loops block on their source where they can, "
         "so this is only a fallback.", (KM, RM, REST))
_declare("Core", "HEARTBEAT_TIMEOUT", 120,
         "TTL in seconds of a process's self-reporting heartbeat key "
         "(`stats:<component>:self:...`). A process that stops cleanly removes its "
         "heartbeat at once; one that dies counts as alive until this TTL.")
_declare("Core", "SC_NODE_ID", "",
         "The id of this process in its heartbeat (`stats:<component>:self:<machine>:<id>`, "
         "a crawler's `...:<machine>:<spiderid>:<id>`). Empty: a new unique id per start. "
         "A supervisor sets a stable name per supervised process (`scrapy-cluster up` "
         "passes the child's name, `crawler-1`, `rest`, ...), so a process restarted any "
         "number of times is one node; give each process on a machine its own.")
_declare("Core", "SC_DATA_DIR", "./.scrapy-cluster",
         "Directory for the embedded Redis server's data (`scrapy-cluster up`).")
_declare("Core", "UP_PROGRESS_INTERVAL_S", 5,
         "Seconds between the progress lines `scrapy-cluster up` prints (pages, pages/s, "
         "backlog, errors, crawlers running; four Redis round trips each); 0 prints none.",
         ("up",))
_declare("Core", "UP_LOG_MAX_BYTES", 50 * 1024 * 1024,
         "Size in bytes at which `scrapy-cluster up` rolls a component's log file "
         "(`SC_DATA_DIR/logs/<name>.log`) to `.1`; 0 never rolls.", ("up",))
_declare("Core", "UP_LOG_BACKUPS", 3,
         "Rolled component log files `scrapy-cluster up` keeps per component.", ("up",))
_declare("Core", "RETRY_FAILURES", True,
         "Retry a Redis Monitor action that failed unexpectedly.", (RM,))
_declare("Core", "RETRY_FAILURES_MAX", 3,
         "How many times a failed Redis Monitor action is retried.", (RM,))

# --- Redis --------------------------------------------------------------
_declare("Redis", "REDIS_URL", None,
         "Redis connection URL (`redis://[:password@]host:port/db`, `rediss://` for TLS, "
         "`unix:///path.sock?db=0`). Wins over REDIS_HOST/REDIS_PORT/REDIS_DB when set.")
_declare("Redis", "REDIS_HOST", "localhost", "The Redis host.")
_declare("Redis", "REDIS_PORT", 6379, "The Redis port.")
_declare("Redis", "REDIS_DB", 0, "The Redis database number.")
_declare("Redis", "REDIS_PASSWORD", None, "Password for REDIS_HOST (ignored when REDIS_URL is set).")
_declare("Redis", "REDIS_SOCKET_TIMEOUT", 10.0,
         "Seconds a single Redis command may take before it fails.")
_declare("Redis", "REDIS_LOCK_EXPIRATION", 6,
         "Seconds before another Redis Monitor takes over a job (or an expiring crawl) whose "
         "monitor stopped refreshing it, i.e. died. A monitor refreshes the jobs in hand every "
         "third of this.", (RM,))

# --- Bus ----------------------------------------------------------------
_declare("Bus", "BUS_BACKEND", "kafka",
         "Message bus: `kafka` (scale-out) or `redis` (Redis Streams; one-Redis "
         "deployments and the embedded `up` mode).")
_declare("Bus", "BUS_MAX_MESSAGE_BYTES", 10 * 1024 * 1024,
         "Largest encoded message the bus accepts; bigger ones are refused at produce time.")
_declare("Bus", "BUS_MAX_DELIVERIES", 5,
         "Times a consumer group is handed a message that is never acknowledged (its "
         "consumer keeps dying on it) before the message goes to the dead-letter topic "
         "`<topic>.dead_letter`; 0 never dead-letters (redelivered forever).")
_declare("Bus", "REDIS_STREAM_MAXLEN", 100_000,
         "Approximate MAXLEN each Redis stream is trimmed to on XADD (Redis Streams bus).")
_declare("Bus", "REDIS_STREAM_CLAIM_IDLE_MS", 60_000,
         "Milliseconds an entry may stay pending with a dead consumer before another "
         "consumer of the group claims it (XAUTOCLAIM).")
_declare("Bus", "REDIS_STREAM_BATCH_SIZE", 500,
         "Messages the Redis Streams producer sends in one pipelined round trip.")
_declare("Bus", "REDIS_STREAM_LINGER_MS", 25,
         "Milliseconds a produced message may wait in the Redis Streams producer's "
         "buffer before a background thread sends it.")
_declare("Bus", "REDIS_STREAM_MAX_BUFFERED", 100_000,
         "Messages the Redis Streams producer keeps while Redis is unreachable; "
         "beyond that `produce` raises BusUnavailableError.")

# --- Kafka --------------------------------------------------------------
_declare("Kafka", "KAFKA_HOSTS", "localhost:9092",
         "Kafka bootstrap servers, comma separated (`h1:9092,h2:9092`).")
_declare("Kafka", "KAFKA_CONFIG", {},
         "Extra librdkafka configuration merged into every client (SASL, TLS, ...), "
         "e.g. `{\"security.protocol\": \"SASL_SSL\", \"sasl.password\": \"...\"}`.")
_declare("Kafka", "KAFKA_TOPIC_PREFIX", "demo",
         "Prefix of every topic: `<prefix>.incoming`, `<prefix>.crawled_firehose`, "
         "`<prefix>.outbound_firehose`, ...")
_declare("Kafka", "KAFKA_INCOMING_TOPIC", "demo.incoming",
         "Topic the Kafka Monitor reads API requests from.", (KM, REST))
_declare("Kafka", "KAFKA_GROUP", "demo-group",
         "Consumer group of the Kafka Monitor instances.", (KM,))
_declare("Kafka", "KAFKA_FEED_TIMEOUT", 10,
         "Seconds `feed` waits for the broker to confirm a request (Kafka Monitor default 5).",
         (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_AUTO_OFFSET_RESET", "earliest",
         "Where a consumer group with no committed offset starts: `earliest` or `latest` "
         "(Rest default `latest`).", (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_TIMEOUT", 50,
         "Milliseconds one consumer poll waits for a message.", (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_COMMIT_INTERVAL_MS", 5000,
         "Kept for compatibility. Offsets are committed only after a message was handled "
         "(at-least-once), never on a timer.", (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_AUTO_COMMIT_ENABLE", True,
         "Kept for compatibility; offsets are always committed explicitly after handling.",
         (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_FETCH_MESSAGE_MAX_BYTES", 10 * 1024 * 1024,
         "Largest single message a consumer fetches.", (KM, REST))
_declare("Kafka", "KAFKA_CONSUMER_SLEEP_TIME", 1,
         "Seconds the Rest service's consumer thread idles between empty polls.", (REST,))
_declare("Kafka", "KAFKA_PRODUCER_TOPIC", "demo.incoming",
         "Topic the Rest service feeds requests to.", (REST,))
_declare("Kafka", "KAFKA_PRODUCER_BATCH_LINGER_MS", 25,
         "Milliseconds the producer waits to batch messages (librdkafka `linger.ms`).")
_declare("Kafka", "KAFKA_PRODUCER_BUFFER_BYTES", 4 * 1024 * 1024,
         "Producer TCP send buffer size in bytes (librdkafka `socket.send.buffer.bytes`).")
_declare("Kafka", "KAFKA_PRODUCER_DELIVERY_TIMEOUT_MS", 300_000,
         "Milliseconds a produced message may wait for the broker before it is reported "
         "failed by `flush` (librdkafka `message.timeout.ms`).")
_declare("Kafka", "KAFKA_TOPIC_PARTITIONS", 3,
         "Partitions of topics the bus creates on demand: the most consumers of one group "
         "that can share a topic.")
_declare("Kafka", "KAFKA_TOPIC_REPLICATION_FACTOR", -1,
         "Replicas of topics the bus creates on demand; -1 uses the broker's default.")
_declare("Kafka", "KAFKA_CONSUMER_SESSION_TIMEOUT_MS", 10_000,
         "Milliseconds without heartbeat before the group gives a consumer's partitions "
         "(and its unacknowledged messages) to the others.", (KM, REST))
_declare("Kafka", "KAFKA_CONN_TIMEOUT", 5,
         "Seconds to wait when connecting to the bus.", (RM, CR))
_declare("Kafka", "KAFKA_APPID_TOPICS", False,
         "Also send results to `<prefix>.crawled_<appid>` / `<prefix>.outbound_<appid>`.",
         (CR, RM))
_declare("Kafka", "KAFKA_BASE_64_ENCODE", False,
         "Base64-encode every crawled body. Bodies that are not valid UTF-8 are always "
         "sent base64 (with `encoding_base64: true`), whatever this says.", (CR,))

# --- ZooKeeper / domain config -------------------------------------------
_declare("ZooKeeper", "ZOOKEEPER_ASSIGN_PATH", "/scrapy-cluster/crawler/",
         "ZooKeeper folder holding the cluster's domain configuration.", (CR, RM))
_declare("ZooKeeper", "ZOOKEEPER_ID", "all",
         "Name of the domain-configuration node inside ZOOKEEPER_ASSIGN_PATH.", (CR, RM))
_declare("ZooKeeper", "ZOOKEEPER_HOSTS", "localhost:2181", "ZooKeeper connection string.", (CR, RM))
_declare("ZooKeeper", "ZOOKEEPER_CONNECT_TIMEOUT_S", 15.0,
         "Seconds `config` commands wait for ZooKeeper before giving up (longer than one "
         "connection attempt, which a just-started server may leave unanswered for 10 s).",
         (CR, RM))
_declare("ZooKeeper", "DOMAIN_CONFIG_BACKEND", "redis",
         "Where the operators' domain document (throttles, blacklist) lives: `redis`, or "
         "`zookeeper` (mirrored into Redis by `scrapy-cluster config sync`, which `up` runs). "
         "Crawlers always read Redis. See docs/operations.md.", (CR, RM, KM))

# --- Plugins ------------------------------------------------------------
_declare("Plugins", "PLUGIN_DIR", "plugins/",
         "Kept for compatibility; plugins are located by dotted path.", (KM, RM))
_declare("Plugins", "PLUGINS", {},
         "`{'dotted.path.Class': rank}`; lower ranks are tried first. Per-component defaults.",
         (KM, RM))

# --- Kafka Monitor ----------------------------------------------------------
_declare("Kafka Monitor", "CRAWL_MAXDEPTH_LIMIT", 3,
         "Largest `maxdepth` a crawl request may ask for (the original API capped it at 3; "
         "raise it to allow deeper crawls).", (KM, REST))
_declare("Kafka Monitor", "KAFKA_MONITOR_BATCH_SIZE", 500,
         "Most API requests the Kafka Monitor takes from the bus, validates and writes to "
         "Redis as one batch (one or two Redis round trips per batch).", (KM,))
_declare("Kafka Monitor", "REDIS_MONITOR_JOB_TTL", 3600,
         "Seconds a Redis Monitor job key (`info:...`, `stop:...`, `statsrequest:...`, "
         "`zk:...`) lives when nobody handles it.", (KM, RM))
_declare("Kafka Monitor", "REDIS_MONITOR_JOBS_MAXLEN", 100_000,
         "Approximate length the Redis Monitor job stream (`redis-monitor:jobs`) is "
         "trimmed to on each write.", (KM, RM))

# --- Redis Monitor ----------------------------------------------------------
_declare("Redis Monitor", "REDIS_MONITOR_BATCH_SIZE", 100,
         "Most jobs the Redis Monitor reads from `redis-monitor:jobs` per pass; their answers "
         "are flushed and the jobs acknowledged together (one MULTI/EXEC).", (RM,))
_declare("Redis Monitor", "MONITORING_LOG", True,
         "Every STATS_DUMP seconds, log one JSON-able `monitoring_update` event (rates, "
         "per-domain statuses, limits, backlog, paused and halted domains).", (RM,))

# --- Logging --------------------------------------------------------------
_declare("Logging", "LOGGER_NAME", "scrapy-cluster", "Logger name (per-component default).",
         (KM, RM, REST))
_declare("Logging", "LOG_DIR", "logs", "Directory of the log file when LOG_STDOUT is False.")
_declare("Logging", "LOG_FILE", "scrapy_cluster.log",
         "Log file name (per-component default); rolls to `.1`, `.2`, ...")
_declare("Logging", "LOG_MAX_BYTES", 10 * 1024 * 1024, "Size in bytes at which the log file rolls.")
_declare("Logging", "LOG_BACKUPS", 5, "Rolled log files kept.")
_declare("Logging", "LOG_STDOUT", True, "Log to standard output instead of LOG_DIR/LOG_FILE.")
_declare("Logging", "LOG_JSON", False, "Write each log record as one JSON line.")
_declare("Logging", "LOG_LEVEL", "INFO", "Lowest level written.")
for _name, _default in (("SC_LOGGER_NAME", "sc-crawler"), ("SC_LOG_DIR", "logs"),
                        ("SC_LOG_FILE", "sc_crawler.log"),
                        ("SC_LOG_MAX_BYTES", 10 * 1024 * 1024), ("SC_LOG_BACKUPS", 5),
                        ("SC_LOG_STDOUT", True), ("SC_LOG_JSON", False),
                        ("SC_LOG_LEVEL", "INFO")):
    _declare("Logging", _name, _default,
             f"The crawler's twin of {_name[3:]} (the crawler reads the SC_ names).", (CR,))

# --- Stats --------------------------------------------------------------
_declare("Stats", "STATS_TOTAL", True, "Collect total and fail counts.", (KM, RM))
_declare("Stats", "STATS_PLUGINS", True, "Collect per-plugin counts.", (KM, RM))
_declare("Stats", "STATS_CYCLE", 5,
         "Seconds between flushes of batched stats increments to Redis.")
_declare("Stats", "STATS_DUMP", 60, "Log a stats summary every N seconds; 0 disables.", (KM, RM))
_declare("Stats", "STATS_DUMP_CRAWL", True, "Redis Monitor also dumps crawler stats.", (RM,))
_declare("Stats", "STATS_DUMP_QUEUE", True, "Redis Monitor also dumps queue backlog stats.", (RM,))
_declare("Stats", "STATS_TIMES", STATS_WINDOWS,
         "Rolling windows collected, by name (`SECONDS_15_MINUTE` ... `SECONDS_1_WEEK`).")
_declare("Stats", "STATS_STATUS_CODES", True, "Collect response status-code stats.", (CR,))
_declare("Stats", "STATUS_RESPONSE_CODES", [200, 404, 403, 504],
         "Status codes with their own rolling-window stats.", (CR,))

# --- Scheduler / frontier ---------------------------------------------------
_declare("Scheduler", "SCHEDULER_PERSIST", True,
         "Kept for compatibility: the queues are shared by every crawler of the spider and always "
         "kept; False is ignored with a warning (remove a crawl with a stop request).", (CR,))
_declare("Scheduler", "SCHEDULER_QUEUE_REFRESH", 10,
         "Kept for compatibility: new domains are dispatchable at once, no refresh cycle.", (CR,))
_declare("Scheduler", "SCHEDULER_QUEUE_TIMEOUT", 3600,
         "Seconds an idle dispatch view (spider type + IP) stays registered.", (CR,))
_declare("Scheduler", "SCHEDULER_BACKLOG_BLACKLIST", True,
         "Keep requests for blacklisted domains queued (True) or drop them at enqueue (False).",
         (CR, KM))
_declare("Scheduler", "SCHEDULER_TYPE_ENABLED", True,
         "Throttle per spider type (keys include `<spiderid>`).", (CR,))
_declare("Scheduler", "SCHEDULER_IP_ENABLED", True,
         "Throttle per public IP (keys include `<ip>`), the original's default: crawlers behind "
         "one public IP share a domain's limit, so N machines with N public IPs may send a site "
         "up to N times it (each IP within it). False: one limit per domain for the whole "
         "cluster, and no public-IP lookups.", (CR,))
_declare("Scheduler", "SCHEDULER_IP_REFRESH", 60, "Seconds between public-IP lookups.", (CR,))
_declare("Scheduler", "SCHEUDLER_ITEM_RETRIES", 2,
         "Kept for compatibility (name as in the original); dispatch no longer cycles.", (CR,))
_declare("Scheduler", "SCHEDULER_BUFFER_SIZE", 32,
         "Requests fetched per frontier pop to refill the crawler's local buffer.", (CR,))
_declare("Scheduler", "PUBLIC_IP_URL", "http://ip.42.pl/raw",
         "URL answering the public IP (the original's), fetched by every crawler every "
         "SCHEDULER_IP_REFRESH s when SCHEDULER_IP_ENABLED; point it at an internal service, or "
         "set it empty (with PUBLIC_IP) to make no lookup. Offline, one warning per outage.",
         (CR,))
_declare("Scheduler", "IP_ADDR_REGEX", r"(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})",
         "Regex extracting the IP from PUBLIC_IP_URL's answer.", (CR,))
_declare("Scheduler", "PUBLIC_IP", None,
         "Fixed public IP used when PUBLIC_IP_URL cannot be reached or is empty.", (CR,))
_declare("Scheduler", "LEASE_TIMEOUT", 600,
         "Seconds a dispatched request stays leased to its crawler before the reaper "
         "returns it to the queue.", (CR, RM))
_declare("Scheduler", "DUPEFILTER_TIMEOUT", 600,
         "Seconds a crawl's duplicate filter lives after its last use.", (CR, KM))
_declare("Scheduler", "CRAWL_STATE_TTL", 86400,
         "Seconds a crawl's keys (state, URL funnel; its duplicate filter at most this) live "
         "once it ended (complete, stopped or expired); a new request revives it.",
         (CR, KM, RM))
_declare("Scheduler", "CRAWL_BLACKLIST_TTL", 604800,
         "Seconds a stopped or expired crawl stays on `<spiderid>:blacklist` (its late requests "
         "are refused); trimmed at the next stop. 0 keeps it for ever, as the original did "
         "(the set then grows by one member per stopped crawl).", (RM,))
_declare("Scheduler", "CRAWL_COMPLETE_GRACE_S", 3.0,
         "Seconds a crawl must have had nothing queued and nothing in flight before the Redis "
         "Monitor declares it complete (the `complete` notice on the outbound topics).", (RM,))
_declare("Scheduler", "FRONTIER_RECHECK_S", 30,
         "Seconds before a pop looks again at a paused (limit 0) or blacklisted domain. "
         "Changes made through the domain config apply on the next pop regardless.",
         (CR, RM, KM))
_declare("Scheduler", "FRONTIER_POP_LOOKAHEAD", 16,
         "Stale ready-set entries one pop may correct besides the n it hands out; bounds "
         "the work of a pop whatever the number of domains.", (CR, RM, KM))
_declare("Scheduler", "FRONTIER_SEEN_CACHE_SIZE", 100000,
         "Links per crawler process remembered as already recorded in their crawl's duplicate "
         "filter, so a repeated link never reaches Redis (about 230 bytes each); 0 sends every "
         "link to Redis.", (CR,))
_declare("Scheduler", "FRONTIER_SEEN_CACHE_S", 120,
         "Seconds a remembered link is trusted; capped at half of the smaller of "
         "DUPEFILTER_TIMEOUT and CRAWL_STATE_TTL, so it never outlives its duplicate filter.",
         (CR,))
_declare("Scheduler", "FRONTIER_PURGE_CHUNK", 5000,
         "Requests one purge step removes (one Lua call); keeps each step to a few ms.",
         (CR, RM, KM))
_declare("Scheduler", "FRONTIER_RECRAWL_BUCKET_MS", 1000,
         "Re-crawls due within this many ms share one bucket (one Redis LIST): a URL is queued "
         "again up to this much after its due time; larger buckets cost less memory per "
         "scheduled URL.", (CR, RM, KM))

# --- Throttle -----------------------------------------------------------
_declare("Throttle", "QUEUE_HITS", 10, "Default requests per QUEUE_WINDOW per domain.", (CR, KM))
_declare("Throttle", "QUEUE_WINDOW", 60,
         "Default throttle window in seconds; 0 disables throttling.", (CR, KM))
_declare("Throttle", "QUEUE_MODERATED", True,
         "Space requests evenly (one per window/hits) instead of allowing bursts.", (CR, KM))
_declare("Throttle", "THROTTLE_SEND_ALLOWANCE_MS", 100,
         "Milliseconds added to every throttle window, so a request that reaches the site a "
         "little after its dispatch (the crawler's event loop, up to ~50 ms measured under "
         "load) still falls inside its window at the site; costs allowance/window of the "
         "allowed rate (0.2 % of a 60 s window, 5 % of a 2 s one).", (CR, KM))
_declare("Throttle", "THROTTLE_LATE_SEND_MS", 20,
         "A request handed to the downloader this many ms or more after its dispatch (robots.txt "
         "lookup, per-domain concurrency, a busy crawler) has its throttle slot moved to that "
         "moment (batched: one script call per CRAWLER_ACK_FLUSH_MS at most).", (CR,))

# --- Crawler ------------------------------------------------------------
_declare("Crawler", "CRAWLER_ALLOW_PRIVATE_NETWORKS", False,
         "Allow URLs on loopback/private/link-local/metadata addresses (SSRF guard off).", (CR,))
_declare("Crawler", "CRAWLER_ALLOWED_PRIVATE_NETWORKS", [],
         "Internal networks the SSRF guard lets through, as CIDR strings (e.g. "
         "`[\"10.1.2.0/24\"]` for an intranet site); every other internal address, and cloud "
         "metadata addresses always, stay refused.", (CR,))
_declare("Crawler", "CRAWLER_MAX_LINKS_PER_PAGE", 1000,
         "Most distinct links read from one page (into its item and towards the frontier); "
         "the rest are counted in the item's `links_dropped` and the crawl's funnel "
         "(`filtered:max_links`). 0 = no limit.", (CR,))
_declare("Crawler", "SITEMAP_MAX_URLS", 50000,
         "Entries read from one sitemap file (sitemaps.org's limit); the rest are not read, "
         "and the stop is logged and counted in the crawl's funnel (`sitemaps.too_many_urls`).",
         (CR,))
_declare("Crawler", "SITEMAP_MAX_BYTES", 52428800,
         "Bytes of one sitemap file after gzip inflation (sitemaps.org's 50 MB); inflating "
         "stops there, so a gzip bomb costs at most this (`sitemaps.too_large`).", (CR,))
_declare("Crawler", "CRAWLER_SPIDER", "link",
         "Spider `scrapy-cluster crawler` runs: `link`, `wandering` or `package.module:Class`.",
         (CR,))
_declare("Crawler", "CRAWLER_ENGINE", "scrapy",
         "Crawler engine: `scrapy` (any spider) or `fast` (asyncio + aiohttp: the `link` and "
         "`wandering` spiders' semantics; docs/crawler.md, \"Fast engine\").", (CR,))
_declare("Crawler", "CRAWLER_TLS_VERIFY", False,
         "Fast engine: verify HTTPS certificates (chain and host name). Off by default, like "
         "the Scrapy engine (Scrapy's default context factory accepts any certificate), so "
         "both engines crawl the same sites.", (CR,))
_declare("Crawler", "CRAWLER_LINK_BATCH_MS", 2,
         "Fast engine: the links of pages finished within this many ms of each other go to "
         "Redis in one enqueue call (a page's lease still ends only after its links are "
         "queued); 0 sends each page's links as soon as the previous call returned.", (CR,))
_declare("Crawler", "CRAWLER_CONCURRENCY", 16,
         "Requests one crawler process downloads at once (Scrapy CONCURRENT_REQUESTS).", (CR,))
_declare("Crawler", "CRAWLER_PER_DOMAIN_CONCURRENCY", 4,
         "Most of those slots one domain may hold, so a slow domain cannot take them all "
         "(Scrapy CONCURRENT_REQUESTS_PER_DOMAIN).", (CR,))
_declare("Crawler", "CRAWLER_ACK_FLUSH_MS", 50,
         "Milliseconds finished requests wait to be acknowledged to the frontier together.", (CR,))
_declare("Crawler", "CRAWLER_PUBLIC_IP_TIMEOUT_S", 3.0,
         "Seconds one PUBLIC_IP_URL lookup may take before the last known IP is kept.", (CR,))
_declare("Crawler", "CRAWLER_STATUS_WINDOW_S", 60,
         "Seconds of per-domain response statuses kept for the circuit breaker.", (CR, RM))
_declare("Crawler", "CRAWLER_STATUS_LAST_N", 50,
         "Most recent response statuses kept per domain for the circuit breaker.", (CR, RM))

# --- Circuit breaker ------------------------------------------------------
_declare("Circuit breaker", "ERROR_TOLERANCE_PERCENT", 10,
         "A domain whose share of error statuses over CRAWLER_STATUS_WINDOW_S is above this "
         "percentage is paused cluster-wide for CIRCUIT_BREAKER_COOLDOWN_S.", (RM,))
_declare("Circuit breaker", "CIRCUIT_BREAKER_MIN_RESPONSES", 10,
         "Fewest statuses in the window before a domain's error share can pause it.", (RM,))
_declare("Circuit breaker", "CIRCUIT_BREAKER_COOLDOWN_S", 60,
         "Seconds a domain stays paused (nothing dispatched, nothing lost) after its error "
         "share went above ERROR_TOLERANCE_PERCENT; errors from before are then not counted "
         "again.", (RM,))
_declare("Circuit breaker", "CIRCUIT_BREAKER_HALT_AFTER", 50,
         "Consecutive error statuses that halt a domain until a `domain-resume` request "
         "(alert on the outbound topic); at most CRAWLER_STATUS_LAST_N.", (RM,))
_declare("Circuit breaker", "CIRCUIT_BREAKER_ERROR_STATUSES", [0, 403, 429, "5xx"],
         "Statuses counted as errors: a code (`0` is no response: a connection failure or "
         "timeout), a class (`\"5xx\"`) or an inclusive range (`\"520-599\"`). Crawlers "
         "record the last such error per domain.", (CR, RM))
_declare("Circuit breaker", "RETRY_AFTER_MAX_S", 3600,
         "Longest pause a `Retry-After` header (seconds or HTTP date) on a 429 or 503 response "
         "imposes on its domain, cluster-wide; 0 ignores the header.", (CR,))

# --- Rest ---------------------------------------------------------------
_declare("Rest", "FLASK_LOGGING_ENABLED", True, "Log each HTTP request of the Rest service.", (REST,))
_declare("Rest", "FLASK_PORT", 5343,
         "Port of the Rest service (`SC` in hexadecimal); `scrapy-cluster rest --port` and "
         "`scrapy-cluster up --port` set it.", (REST,))
_declare("Rest", "DAEMON_THREAD_JOIN_TIMEOUT", 10,
         "Seconds the Rest service's background workers get to stop.", (REST,))
_declare("Rest", "WAIT_FOR_RESPONSE_TIME", 5,
         "Seconds the Rest service waits for an answer before returning a poll id.", (REST,))
_declare("Rest", "SCHEMA_DIR", "schemas/", "Directory of extra JSON Schemas for the Rest service.",
         (REST,))
_declare("Rest", "REST_HOST", "0.0.0.0",
         "Address the Rest service listens on (`0.0.0.0`: every interface, as the original; "
         "set `127.0.0.1` to keep it on the machine, or set REST_API_KEYS).", (REST,))
_declare("Rest", "REST_API_KEYS", [],
         "API keys the Rest service accepts (header `X-API-Key`, `Authorization: Bearer`, or "
         "the dashboard's login session). Empty: no key needed (a warning is logged at start "
         "when REST_HOST is not a loopback address). When set, every endpoint but `/` needs "
         "one.", (REST,))
_declare("Rest", "REST_API_KEY_MIN_LENGTH", 16,
         "Shortest API key the Rest service accepts; a shorter one in REST_API_KEYS stops it "
         "at start with an error.", (REST,))
_declare("Rest", "REST_AUTH_FAILURES_ALLOWED", 10,
         "Wrong API keys a client address (an IPv6 client's /64) may send before each further "
         "attempt from it is refused with 429 and `Retry-After` for 1 s, then 2 s, 4 s, ... up "
         "to REST_AUTH_LOCKOUT_MAX_S.", (REST,))
_declare("Rest", "REST_AUTH_FAILURE_WINDOW_S", 60,
         "Seconds without a wrong key after which an address's count of wrong keys starts "
         "again from 0.", (REST,))
_declare("Rest", "REST_AUTH_LOCKOUT_MAX_S", 30,
         "Longest wait imposed on an address that keeps sending wrong API keys.", (REST,))
_declare("Rest", "REST_SESSION_TTL_S", 12 * 3600,
         "Seconds a dashboard login lasts: the signed session cookie's `Max-Age` and expiry.",
         (REST,))
_declare("Rest", "REST_COOKIE_SECURE", False,
         "Always mark the dashboard's session cookie `Secure`. Without it, the cookie is Secure "
         "when the request came over https, directly or through a REST_TRUSTED_PROXIES proxy "
         "that says `X-Forwarded-Proto: https`.", (REST,))
_declare("Rest", "REST_TRUSTED_PROXIES", [],
         "Addresses or networks (`10.0.0.0/8`) of reverse proxies whose `X-Forwarded-For` and "
         "`X-Forwarded-Proto` the Rest service believes. Empty: those headers are ignored.",
         (REST,))
_declare("Rest", "REST_MAX_HEADER_BYTES", 16 * 1024,
         "Largest request line plus headers the Rest service reads; a larger head is answered "
         "431 and the connection closed, before the head is parsed or the key checked.", (REST,))
_declare("Rest", "REST_MAX_HEADERS", 100,
         "Most header fields a request may have; more are answered 431.", (REST,))
_declare("Rest", "REST_HTTP_PARSER", "auto",
         "HTTP/1.1 parser of the Rest service: `httptools`, `h11`, or `auto` (httptools when "
         "installed). Both are held to REST_MAX_HEADER_BYTES and REST_MAX_HEADERS.", (REST,))
_declare("Rest", "REST_MAX_BODY_BYTES", 1024 * 1024,
         "Largest request body the Rest service reads; larger ones get a 413 answer.", (REST,))
_declare("Rest", "REST_POLL_TTL", 600,
         "Seconds an answer nobody was waiting for stays at `rest:poll:<uuid>` for `/poll`.",
         (REST,))
_declare("Rest", "DASHBOARD_REFRESH_S", 2.0,
         "Seconds between the dashboard's (`/ui`) snapshots of the cluster: one snapshot per "
         "interval per Rest process, shared by every viewer, pushed over server-sent events.",
         (REST,))
_declare("Rest", "REST_HEALTH_INTERVAL_S", 2.0,
         "Seconds between the Rest service's checks of Redis and the bus (what `/` reports) "
         "and its heartbeat writes.", (REST,))
_declare("Rest", "METRICS_TOP_DOMAINS", 20,
         "Domains per spider with their own backlog series in `/metrics` (the largest "
         "backlogs); the others are only counted in the spider's total. Bounds the series "
         "Prometheus stores.", (REST,))

# --- Scrapy (crawler) -----------------------------------------------------
# Scrapy's own settings that the project documents or relies on, declared here so that they are
# taken from the environment and `--set` like the project's own and listed with their source by
# `scrapy-cluster settings -c crawler`. The defaults are the crawler's (crawler/settings.py, else
# Scrapy's); a value is handed to Scrapy only when it was given (file, environment, flag).
# Both engines read them (the fast engine through the same Scrapy settings object).
SCRAPY_SECTION = "Scrapy (crawler)"
_SCRAPY_USER_AGENT = f"Scrapy/{_package_version('scrapy')} (+https://scrapy.org)"
_declare(SCRAPY_SECTION, "DOWNLOAD_MAXSIZE", 32 * 1024 * 1024,
         "Largest response body in bytes (on the wire, and again decompressed); a larger one "
         "gives an error item with `reason: too_large`. Scrapy's default is 1 GiB.", (CR,))
_declare(SCRAPY_SECTION, "DOWNLOAD_WARNSIZE", 8 * 1024 * 1024,
         "Response size in bytes above which a warning is logged.", (CR,))
_declare(SCRAPY_SECTION, "DOWNLOAD_TIMEOUT", 30.0,
         "Seconds one download attempt may take. Scrapy's default is 180.", (CR,))
_declare(SCRAPY_SECTION, "RETRY_TIMES", 2,
         "Retries of a request that got no response or a RETRY_HTTP_CODES status (each retry "
         "goes back through the frontier).", (CR,))
_declare(SCRAPY_SECTION, "RETRY_HTTP_CODES", [500, 502, 503, 504, 522, 524, 408, 429],
         "Response statuses that are retried.", (CR,))
_declare(SCRAPY_SECTION, "RETRY_PRIORITY_ADJUST", -1,
         "Priority change of a retried request.", (CR,))
_declare(SCRAPY_SECTION, "RETRY_EXCEPTIONS", [
    "scrapy.exceptions.CannotResolveHostError", "scrapy.exceptions.DownloadConnectionRefusedError",
    "scrapy.exceptions.DownloadFailedError", "scrapy.exceptions.DownloadTimeoutError",
    "scrapy.exceptions.ResponseDataLossError", "twisted.internet.error.ConnectionDone",
    "twisted.internet.error.ConnectError", "twisted.internet.error.ConnectionLost",
    "builtins.OSError", "scrapy.core.downloader.handlers.http11.TunnelError"],
         "Exceptions (dotted paths) after which a request is retried.", (CR,))
_declare(SCRAPY_SECTION, "REDIRECT_MAX_TIMES", 20,
         "Redirects one request may follow before its error item (`too_many_redirects`).", (CR,))
_declare(SCRAPY_SECTION, "REDIRECT_PRIORITY_ADJUST", 2,
         "Priority change of a redirect target.", (CR,))
_declare(SCRAPY_SECTION, "ROBOTSTXT_OBEY", True, "Obey robots.txt.", (CR,))
_declare(SCRAPY_SECTION, "ROBOTSTXT_USER_AGENT", None,
         "User agent matched against robots.txt; None: the request's User-Agent.", (CR,))
_declare(SCRAPY_SECTION, "USER_AGENT", _SCRAPY_USER_AGENT,
         "User-Agent of requests whose crawl gave no `useragent`.", (CR,))
_declare(SCRAPY_SECTION, "DEFAULT_REQUEST_HEADERS", {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en"}, "Headers every request carries unless it sets its own.", (CR,))
_declare(SCRAPY_SECTION, "URLLENGTH_LIMIT", 2083,
         "Longest URL followed; longer links are dropped.", (CR,))
_declare(SCRAPY_SECTION, "REFERER_ENABLED", True, "Send a Referer header.", (CR,))
_declare(SCRAPY_SECTION, "REFERRER_POLICY",
         "scrapy.spidermiddlewares.referer.DefaultReferrerPolicy",
         "Referrer policy (a name such as `no-referrer`, or a dotted path).", (CR,))
_declare(SCRAPY_SECTION, "DNS_TIMEOUT", 60,
         "Seconds a DNS lookup may take (with the SSRF guard off; with it on, DOWNLOAD_TIMEOUT "
         "bounds the lookup).", (CR,))
_declare(SCRAPY_SECTION, "CONCURRENT_ITEMS", 1,
         "Items Scrapy processes at once per response (one item per page here).", (CR,))
_declare(SCRAPY_SECTION, "DOWNLOADER_STATS", False,
         "Count bytes of every request and response in Scrapy's local stats.", (CR,))
_declare(SCRAPY_SECTION, "COOKIES_ENABLED", False,
         "Scrapy's cookie jar; off: each request sends its own crawl's `cookie`.", (CR,))

# --- Migration (scrapy-cluster migrate) ------------------------------------
_declare("Migration", "MIGRATE_BATCH_SIZE", 500,
         "Original queue members `scrapy-cluster migrate` imports per transaction (one "
         "enqueue and one journal update each; a killed run resumes after the last one).",
         ("migrate",))
_declare("Migration", "MIGRATE_BATCH_PAUSE_S", 0.0,
         "Seconds `scrapy-cluster migrate` pauses after each batch, to go easy on a Redis "
         "that serves traffic during the import.", ("migrate",))

DEFAULTS: dict[str, Any] = {spec.name: spec.default for spec in SPECS}

KAFKA_MONITOR_PLUGINS: dict[str, int] = {
    "scrapy_cluster.kafka_monitor.plugins.ScraperHandler": 100,
    "scrapy_cluster.kafka_monitor.plugins.ActionHandler": 200,
    "scrapy_cluster.kafka_monitor.plugins.StatsHandler": 300,
    "scrapy_cluster.kafka_monitor.plugins.ZookeeperHandler": 400,
}

COMPONENT_DEFAULTS: dict[str, dict[str, Any]] = {
    KM: {
        "SLEEP_TIME": 0.01,
        "KAFKA_FEED_TIMEOUT": 5,
        "LOGGER_NAME": "kafka-monitor",
        "LOG_FILE": "kafka_monitor.log",
        "PLUGINS": dict(KAFKA_MONITOR_PLUGINS),
    },
    RM: {
        "LOGGER_NAME": "redis-monitor",
        "LOG_FILE": "redis_monitor.log",
        "PLUGINS": {
            "scrapy_cluster.redis_monitor.plugins.InfoMonitor": 100,
            "scrapy_cluster.redis_monitor.plugins.StopMonitor": 200,
            "scrapy_cluster.redis_monitor.plugins.ExpireMonitor": 300,
            "scrapy_cluster.redis_monitor.plugins.StatsMonitor": 400,
            "scrapy_cluster.redis_monitor.plugins.ZookeeperMonitor": 500,
            "scrapy_cluster.redis_monitor.plugins.CircuitBreakerMonitor": 600,
            "scrapy_cluster.redis_monitor.plugins.CompleteMonitor": 700,
        },
    },
    REST: {
        "KAFKA_CONSUMER_AUTO_OFFSET_RESET": "latest",
        # /feed validates with the Kafka Monitor's plugins' schemas (same ranks, same files).
        "PLUGINS": dict(KAFKA_MONITOR_PLUGINS),
        "LOGGER_NAME": "rest-service",
        "LOG_FILE": "rest_service.log",
    },
    CR: {},
}
