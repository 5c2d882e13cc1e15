"""``CircuitBreakerMonitor``: runs the circuit breaker (``redis_monitor.breaker``) every second.

A pause is logged; a halt is also published on the outbound topics as an alert
``{action: "domain-halted", domain, reason, consecutive_errors, error_share, responses,
server_time}``. ``domain-resume`` requests (``ZookeeperMonitor``) call ``resume``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from scrapy_cluster.redis_monitor.breaker import CircuitBreaker
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor


def breaker_for(settings: Mapping[str, Any], redis_client: redis.Redis,
                clock: Callable[[], float]) -> CircuitBreaker:
    """A breaker on ``redis_client``. An injected test clock (epoch s) becomes its ms clock;
    the real one leaves the breaker on its own wall clock and the frontier on Redis time."""
    if clock is time.time:
        return CircuitBreaker.from_settings(settings, redis_client)
    return CircuitBreaker.from_settings(settings, redis_client,
                                        clock=lambda: int(clock() * 1000))


class CircuitBreakerMonitor(BaseMonitor):
    tick_interval_s = 1.0

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.breaker = breaker_for(settings, self.redis, self.clock)

    def tick(self) -> int:
        events = self.breaker.evaluate()
        for event in events:
            details = {"domain": event.domain, "state": event.state, "reason": event.reason,
                       "error_share": round(event.error_share, 3),
                       "responses": event.responses,
                       "consecutive_errors": event.consecutive_errors,
                       "until_ms": event.until_ms}
            if event.state == "halted":
                self.logger.error("circuit breaker halted domain %s: %s", event.domain,
                                  event.reason, extra=details)
                self.send({"action": "domain-halted", "domain": event.domain,
                           "reason": event.reason,
                           "consecutive_errors": event.consecutive_errors,
                           "error_share": details["error_share"], "responses": event.responses,
                           "server_time": self.server_time()})
            else:
                self.logger.warning("circuit breaker %s domain %s: %s", event.state,
                                    event.domain, event.reason, extra=details)
        return len(events)
