"""What both backends do with a poison message: the headers it carries, the warning logged.

A message handed out ``BUS_MAX_DELIVERIES`` times without being acknowledged is
written to ``topics.dead_letter(topic)`` with its value and key unchanged and
these headers (Kafka record headers, extra fields of the Redis stream entry):

- ``origin_topic``: the topic it was read from;
- ``origin``: its place there (``<partition>:<offset>`` on Kafka, the entry id on Redis);
- ``group``: the consumer group that gave up on it;
- ``deliveries``: how many times that group handed it out;
- ``error``: why it could not be handled, when the bus knows (a value that is not
  JSON); a consumer that died on it leaves no reason behind.
"""

from __future__ import annotations

import logging

from scrapy_cluster.bus.base import Message

logger = logging.getLogger(__name__)


def headers(message: Message, *, group: str, deliveries: int) -> dict[str, str]:
    """The dead-letter headers of ``message`` (see the module docstring)."""
    if message.entry_id is not None:
        origin = message.entry_id
    else:
        origin = f"{message.partition}:{message.offset}"
    fields = {"origin_topic": message.topic, "origin": origin, "group": group,
              "deliveries": str(deliveries)}
    if message.error:
        fields["error"] = message.error
    return fields


def log_dead_lettered(message: Message, *, group: str, deliveries: int, dead_topic: str,
                      total: int) -> None:
    """One warning per dead-lettered message."""
    origin = headers(message, group=group, deliveries=deliveries)["origin"]
    logger.warning(
        "message %s of %s delivered %d times to group %r without acknowledgement; moved to %s "
        "(%d dead-lettered by this consumer)", origin, message.topic, deliveries, group,
        dead_topic, total,
        extra={"topic": message.topic, "group": group, "origin": origin,
               "deliveries": deliveries, "dead_letter_topic": dead_topic,
               "dead_lettered": total})
