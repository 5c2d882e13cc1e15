"""Probe of the test broker: does tansu keep what it acknowledged across a restart?

Not our code, and not a test: a fact the fault suite depends on. Usage:
``.venv/bin/python benchmarks/broker_durability.py [--rounds 3]``. Each round starts a persistent
tansu (S3 on a private moto server, ``tests.support.kafka_broker.KafkaBroker(persist=True)``),
writes a numbered message every ~0.5 ms with an idempotent ``acks=all`` producer, restarts the
broker after 3 s (down 3 s), writes 3 s more, then reads the topic from the beginning and prints
how many acknowledged messages are gone. Figures in docs/reliability.md ("Faults").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.kafka_broker import KafkaBroker  # noqa: E402

MESSAGES_MAX = 100_000


def read_all(bootstrap: str, topic: str) -> set[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    seen: set[int] = set()
    deadline, last_new = time.monotonic() + 30, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last_new < 5:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(int(message.value()))
            last_new = time.monotonic()
    consumer.close()
    return seen


def one_round(workdir: Path) -> tuple[int, int, int]:
    """(acknowledged, acknowledged but gone after the restart, delivery failures)."""
    broker = KafkaBroker(workdir, persist=True)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("durability", 1, 1)]).values():
            future.result(10)
        producer = confluent_kafka.Producer({
            "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 60_000})
        acknowledged: set[int] = set()
        failed: list[str] = []

        def delivered(error: confluent_kafka.KafkaError | None,
                      message: confluent_kafka.Message) -> None:
            (failed.append(str(error)) if error is not None
             else acknowledged.add(int(message.value())))

        stop = threading.Event()

        def produce() -> None:
            for n in range(MESSAGES_MAX):
                if stop.is_set():
                    return
                producer.produce("durability", value=str(n).encode(), on_delivery=delivered)
                producer.poll(0)
                time.sleep(0.0005)

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(3)
        broker.restart(down_s=3)
        time.sleep(3)
        stop.set()
        writer.join(30)
        producer.flush(30)
        gone = acknowledged - read_all(broker.bootstrap, "durability")
        return len(acknowledged), len(gone), len(failed)
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            acknowledged, gone, failed = one_round(Path(tmp))
        print(f"round {n + 1}: acknowledged {acknowledged}, acknowledged but gone after the "
              f"restart {gone}, delivery failures {failed}")


if __name__ == "__main__":
    main()
