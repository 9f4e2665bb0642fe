"""Produce and consume throughput over TLS and SASL_SSL beside PLAINTEXT, on one cluster in one run.

    python benchmarks/bench_tls.py                       # 3 brokers, 500,000 x 100 B, 3 rounds
    python benchmarks/bench_tls.py --records 1000000 --rounds 5 --rf 1

One rlog cluster whose brokers have three listeners: PLAINTEXT; SSL with client certificates
required (`ssl.client.auth = "required"`, a local CA from rlog.cli.certificates); and SASL_SSL
with SCRAM-SHA-512 (a user made with AlterUserScramCredentials; rlog asks SASL_SSL clients for
a certificate too, so this client also presents one). No authorizer. The followers replicate
over PLAINTEXT in every case, so only the clients' bytes cross TLS. Each round, for each
listener: one confluent-kafka producer writes the records (acks=all, linger.ms=5, large
batches) into a fresh 6-partition topic, then one consumer reads them all from the beginning.
Figures are records/s (medians over rounds) and each listener's ratio to PLAINTEXT. Over TLS a
fetch answer's log bytes are read and encrypted by the broker instead of sent with sendfile;
SASL adds one authentication per connection and nothing per request.
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
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from rlog.cli.certificates import demo_files
from rlog.daemon.wire import BlockingKafkaClient, WireError

HOST = "127.0.0.1"
SSL_OFFSET = 100
SASL_SSL_OFFSET = 200
USER, PASSWORD = "bench", "bench-secret"
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
        ports += [base + offset + i for offset in (SSL_OFFSET, SASL_SSL_OFFSET)
                  for i in range(brokers)]  # fmt: skip
        if all(free(port) for port in ports):
            return base
    raise RuntimeError("no free ports")


def start(root: Path, brokers: int) -> tuple[subprocess.Popen[bytes], int, dict[str, str]]:
    files = demo_files(root / "tls")
    base = free_base(brokers)
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "PLAINTEXT://{HOST}:{base},SSL://{HOST}:{base + SSL_OFFSET},SASL_SSL://{HOST}:{base + SASL_SSL_OFFSET}"
"inter.broker.listener.name" = "PLAINTEXT"
"sasl.enabled.mechanisms" = "SCRAM-SHA-512"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"ssl.client.auth" = "required"
"""  # noqa: E501
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
    sasl_ssl = ",".join(f"{HOST}:{base + SASL_SSL_OFFSET + i}" for i in range(args.brokers))
    scram = {
        **tls,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    listeners = (
        ("PLAINTEXT", plaintext, {}),
        ("SSL", encrypted, tls),
        ("SASL_SSL", sasl_ssl, scram),
    )
    results: dict[str, list[float]] = {}
    admin: AdminClient | None = AdminClient({"bootstrap.servers": plaintext})
    try:
        assert admin is not None
        user = UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
        )
        for future in admin.alter_user_scram_credentials([user]).values():
            future.result(timeout=30)
        for round_index in range(args.rounds):
            for name, bootstrap, config in listeners:
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
        admin = None  # destroyed before the brokers stop, or it logs reconnecting to them
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    medians = {key: statistics.median(values) for key, values in results.items()}
    names = [name for name, _bootstrap, _config in listeners]
    print(
        f"rlog, {args.brokers} brokers, RF={args.rf}, acks=all, {args.records:,} x 100 B, "
        f"records/s, median of {args.rounds}"
    )
    ratios = [f"{name}/PLAINTEXT" for name in names[1:]]
    print(f"  {'':8}" + "".join(f"{name:>20}" for name in names + ratios))
    for kind in ("produce", "consume"):
        row = [f"{medians[f'{name} {kind}']:>20,.0f}" for name in names]
        plain = medians[f"PLAINTEXT {kind}"]
        row += [f"{medians[f'{name} {kind}'] / plain:>20.2f}" for name in names[1:]]
        print(f"  {kind:8}" + "".join(row))


if __name__ == "__main__":
    main()
