"""``ZookeeperMonitor``: domain throttle and blacklist requests, applied through the domain
configuration (``domain_config``: Redis or ZooKeeper, DOMAIN_CONFIG_BACKEND), plus
``domain-resume`` for a domain the circuit breaker paused or halted.

The name is kept from the original API. Every change is a compare-and-set of the whole
domain document (``domain_config.update``), so two requests racing never lose one another's
change; crawlers obey it on their next pop. Answer: ``{action, domain, server_time, uuid,
appid}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scrapy_cluster.domain_config import DomainDocument, frontier_domain, open_store, update
from scrapy_cluster.domain_config.document import domain_throttle
from scrapy_cluster.errors import DomainConfigError, JobError
from scrapy_cluster.redis_monitor.jobs import Job
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.redis_monitor.plugins.circuit_breaker import breaker_for

ACTIONS = ("domain-update", "domain-remove", "blacklist-update", "blacklist-remove",
           "domain-resume")


class ZookeeperMonitor(BaseMonitor):
    job_types = ("zk",)
    regex = r"^zk:"
    required = {"appid": str, "uuid": str, "action": str, "domain": str}

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings
        self.normalize = frontier_domain()
        self.breaker = breaker_for(settings, self.redis, self.clock)

    def handle(self, job: Job) -> None:
        request = self.validate(job)
        action = request["action"]
        if action not in ACTIONS:
            raise JobError(f"unknown domain action {action!r}; expected one of "
                           f"{', '.join(ACTIONS)}")
        try:
            domain = self.normalize(request["domain"])
        except (ValueError, DomainConfigError) as exc:
            raise JobError(f"invalid domain {request['domain']!r}: {exc}") from exc
        if action == "domain-resume":
            resumed = self.breaker.resume(domain)
            self.logger.info("Domain resumed" if resumed else "Domain was not paused",
                             extra={"domain": domain})
        else:
            change = self._change(action, domain, request)
            store = open_store(self.settings, self.redis)
            try:
                update(store, change)
            finally:
                store.close()
        self.send({"action": action, "domain": domain, "server_time": self.server_time(),
                   "uuid": request["uuid"], "appid": request["appid"]})
        self.logger.info("Applied domain request", extra={"action": action, "domain": domain})

    @staticmethod
    def _change(action: str, domain: str,
                request: Mapping[str, Any]) -> Callable[[DomainDocument], DomainDocument]:
        if action == "domain-update":
            entry = {name: request[name] for name in ("hits", "window", "scale", "moderated")
                     if request.get(name) is not None}
            if isinstance(entry.get("scale"), (int, float)):
                entry["scale"] = min(1.0, max(0.0, float(entry["scale"])))  # the API clamps
            try:
                throttle = domain_throttle(domain, entry)
            except DomainConfigError as exc:
                raise JobError(str(exc)) from exc
            return lambda document: document.with_throttle(domain, throttle)
        if action == "domain-remove":
            return lambda document: document.without_throttle(domain)
        if action == "blacklist-update":
            return lambda document: document.with_blacklisted(domain)
        return lambda document: document.without_blacklisted(domain)
