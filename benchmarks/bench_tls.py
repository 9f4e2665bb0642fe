"""Produce and consume throughput over TLS beside PLAINTEXT, on the same cluster in one run.

    python benchmarks/bench_tls.py                       # 3 brokers, 500,000 x 100 B, 3 rounds
    python benchmarks/bench_tls.py --records 1000000 --rounds 5 --rf 1

One rlog cluster whose brokers have two listeners: PLAINTEXT, and SSL with client certificates
required (`ssl.client.auth = "required"`, a local CA from rlog.cli.certificates). The followers
replicate over PLAINTEXT in both cases, so only the clients' bytes cross TLS. Each round, for
each listener: one confluent-kafka producer writes the records (acks=all, linger.ms=5, large
batches) into a fresh 6-partition topic, then one consumer reads them all from the beginning.
Figures are records/s (medians over rounds) and the SSL/PLAINTEXT ratios. Over TLS a fetch
answer's log bytes are read and encrypted by the broker instead of sent with sendfile.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlog.cli.certificates import demo_files
from rlog.daemon.wire import BlockingKafkaClient, WireError

HOST = "127.0.0.1"
SSL_OFFSET = 100
PARTITIONS = 6
PRODUCER = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


def free_base(brokers: int) -> int:
    import socket

    def free(port: int) -> bool:
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                return False
        return True

    for base in range(23_000, 31_000, 211):
        ports = [base + i for i in range(brokers + 1)]
        ports += [base + SSL_OFFSET + i for i in range(brokers)]
        if all(free(port) for port in ports):
            return base
    raise RuntimeError("no free ports")


def start(root: Path, brokers: int) -> tuple[subprocess.Popen[bytes], int, dict[str, str]]:
    files = demo_files(root / "tls")
    base = free_base(brokers)
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "PLAINTEXT://{HOST}:{base},SSL://{HOST}:{base + SSL_OFFSET}"
"inter.broker.listener.name" = "PLAINTEXT"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"ssl.client.auth" = "required"
"""
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "rlog.daemon.rlogd", "--brokers", str(brokers),
         "--data-dir", str(root / "data"), "--base-port", str(base), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with BlockingKafkaClient(HOST, base, timeout_s=2) as client:
                body = client.request(
                    3, 8, {"topics": None, "allow_auto_topic_creation": False,
                           "include_cluster_authorized_operations": False,
                           "include_topic_authorized_operations": False},
                )  # fmt: skip
            if len(body["brokers"]) == brokers:
                break
        except (OSError, WireError):
            pass
        time.sleep(0.2)
    tls = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca),
        "ssl.certificate.location": str(files.client),
        "ssl.key.location": str(files.client),
    }
    return process, base, tls


def produce(bootstrap: str, config: dict[str, str], topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **config})
    value = b"x" * 100
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
    return records / (time.monotonic() - started)


def consume(bootstrap: str, config: dict[str, str], topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            **config,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    started = None
    deadline = time.monotonic() + 300
    while seen < records and time.monotonic() < deadline:
        batch = consumer.consume(10_000, 1.0)
        if batch and started is None:
            started = time.monotonic()
        seen += sum(1 for message in batch if message.error() is None)
    elapsed = time.monotonic() - (started or time.monotonic())
    consumer.close()
    if seen < records:
        raise RuntimeError(f"read {seen} of {records}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--rf", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rlog-bench-tls-"))
    process, base, tls = start(root, args.brokers)
    plaintext = ",".join(f"{HOST}:{base + i}" for i in range(args.brokers))
    encrypted = ",".join(f"{HOST}:{base + SSL_OFFSET + i}" for i in range(args.brokers))
    results: dict[str, list[float]] = {}
    try:
        admin = AdminClient({"bootstrap.servers": plaintext})
        for round_index in range(args.rounds):
            for name, bootstrap, config in (
                ("PLAINTEXT", plaintext, {}),
                ("SSL", encrypted, tls),
            ):
                topic = f"tls-bench-{name.lower()}-{round_index}"
                for future in admin.create_topics([NewTopic(topic, PARTITIONS, args.rf)]).values():
                    future.result(timeout=30)
                time.sleep(1)  # leaders settle
                produced = produce(bootstrap, config, topic, args.records)
                consumed = consume(bootstrap, config, topic, args.records)
                results.setdefault(f"{name} produce", []).append(produced)
                results.setdefault(f"{name} consume", []).append(consumed)
                print(
                    f"round {round_index + 1} {name}: produce {produced:,.0f} rec/s, "
                    f"consume {consumed:,.0f} rec/s",
                    file=sys.stderr,
                )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    medians = {key: statistics.median(values) for key, values in results.items()}
    print(
        f"rlog, {args.brokers} brokers, RF={args.rf}, acks=all, {args.records:,} x 100 B, "
        f"median of {args.rounds}"
    )
    for key, value in medians.items():
        print(f"  {key:20} {value:>12,.0f} rec/s")
    for kind in ("produce", "consume"):
        ratio = medians[f"SSL {kind}"] / medians[f"PLAINTEXT {kind}"]
        print(f"  SSL/PLAINTEXT {kind:8} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
