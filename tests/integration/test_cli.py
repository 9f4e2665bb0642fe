"""The real ``rlog`` command against clusters it starts itself with ``rlog cluster up``.

Every cluster runs in a tmp data dir on a random free base port and is stopped in a fixture
teardown with ``rlog cluster down``; if rlogd is somehow still alive after that, only the pid
this test started (and checked by its command line) is killed. Every subprocess has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import random
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from support.cli_runner import (
    COMMAND_TIMEOUT_S,
    RLOG,
    Result,
    clean_env,
    ok,
    one_line_error,
    rlog,
)
from support.cluster import free_base_port

pytestmark = pytest.mark.integration

UP_TIMEOUT_S = 90


@dataclass
class Cluster:
    data_dir: Path
    base_port: int
    rlogd_pid: int
    up_err: str = ""  # what `rlog cluster up` said on stderr

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    def run(
        self, *args: str, stdin: str | None = None, timeout: float = COMMAND_TIMEOUT_S
    ) -> Result:
        return rlog(*args, data_dir=self.data_dir, stdin=stdin, timeout=timeout)


def _rlogd_pid(data_dir: Path) -> int:
    return int(json.loads((data_dir / "rlogd.json").read_text())["pid"])


def _is_our_rlogd(pid: int, data_dir: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except OSError:
        return False
    return (
        status != "Z"
        and any(b"rlogd" in a for a in argv)
        and str(data_dir.resolve()).encode() in argv
    )


def stop_cluster(data_dir: Path, pid: int | None) -> None:
    """``rlog cluster down``; then, only if needed, SIGKILL the rlogd we started."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        rlog("cluster", "down", "--data-dir", str(data_dir), data_dir=data_dir, timeout=60)
    if pid is None:
        return
    deadline = time.monotonic() + 5
    while _is_our_rlogd(pid, data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _is_our_rlogd(pid, data_dir):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def running_cluster(data_dir: Path, *extra: str, brokers: int = 1) -> Iterator[Cluster]:
    base_port = free_base_port(brokers)
    pid: int | None = None
    try:
        result = rlog(
            "cluster",
            "up",
            "--brokers",
            str(brokers),
            "--base-port",
            str(base_port),
            "--data-dir",
            str(data_dir),
            *extra,
            data_dir=data_dir,
            timeout=UP_TIMEOUT_S,
        )
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = _rlogd_pid(data_dir)
        ok(result)
        assert pid is not None
        yield Cluster(data_dir, base_port, pid, result.err)
    finally:
        stop_cluster(data_dir, pid)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("rlog-cli") / "data") as running:
        yield running


_topic_counter = iter(range(1_000_000))


def new_topic(prefix: str = "t") -> str:
    return f"{prefix}-{next(_topic_counter)}-{random.randrange(1 << 30):x}"


# -- cluster up / status / down ----------------------------------------------------------


def test_up_status_up_again_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "no-autocreate.toml"
    config.write_text('[broker]\n"auto.create.topics.enable" = false\n')
    with running_cluster(data_dir, "--config", str(config)) as c:
        address = f"127.0.0.1:{c.base_port}"
        status = ok(c.run("cluster", "status", "--data-dir", str(data_dir)))
        lines = status.out.splitlines()
        assert lines[1].split() == [
            "NAME",
            "ROLE",
            "ADDRESS",
            "PID",
            "STATE",
            "CPU%",
            "RSS",
            "UPTIME",
            "RESTARTS",
            "ANSWERS",
        ]
        controller_address = f"127.0.0.1:{c.base_port + 1}"
        assert lines[2].split()[:3] == ["controller", "controller", controller_address]
        assert lines[3].split()[:3] == ["broker-1", "broker", address]
        for line in lines[2:4]:
            state, cpu, rss, uptime, restarts, answers = line.split()[4:]
            assert (state, restarts, answers) == ("running", "0", "yes")
            # "-" until rlogd's first psutil sample (every second)
            assert cpu == "-" or cpu.isdigit()
            assert rss == "-" or rss.endswith("M")
            assert uptime.endswith("s")
        document = json.loads(ok(c.run("cluster", "status", "--json")).out)
        assert document["rlogd_pid"] == c.rlogd_pid
        assert len(document["cluster_id"]) == 22
        assert [b["answers"] for b in document["brokers"]] == [True]
        assert document["controller"]["role"] == "controller"
        assert document["controller"]["answers"] is True
        assert document["controller"]["address"] == controller_address

        again = ok(c.run("cluster", "up", "--data-dir", str(data_dir)))
        assert "already running" in again.err
        assert f"export RLOG_BOOTSTRAP={address}" in again.out
        assert _rlogd_pid(data_dir) == c.rlogd_pid

        # auto.create.topics.enable=false in the broker: producing to a missing topic fails.
        missing = c.run("produce", new_topic("missing"), stdin="a\n")
        one_line_error(missing, 5, "unknown topic")

        down = ok(c.run("cluster", "down", "--data-dir", str(data_dir)))
        assert "Stopped" in down.err
        assert not (data_dir / "rlogd.json").exists()
        assert not _is_our_rlogd(c.rlogd_pid, data_dir)
        one_line_error(c.run("cluster", "status"), 3, "not running", str(data_dir))
        assert "not running" in ok(c.run("cluster", "down")).err


def _config_value(c: Cluster, key: str) -> object:
    return json.loads(ok(c.run("config", "get", key, "--json")).out)[key]


def test_the_cluster_keeps_its_own_copy_of_its_config(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    copy = data_dir.resolve() / "rlog.toml"
    # A new data dir without --config: a copy of comments only, which config set edits.
    with running_cluster(data_dir) as c:
        assert ok(c.run("config", "path")).out == f"{copy}\n"
        assert copy.read_text().startswith("# ")
        done = ok(c.run("config", "set", "log.retention.ms", "3600000"))
        assert "applied retention.ms=3600000" in done.out, done.out
        assert '"log.retention.ms" = 3600000' in copy.read_text()
    made = copy.read_text()

    # --config FILE is copied (never edited itself); the older copy differs: kept as a backup.
    given = tmp_path / "given.toml"
    text = '[broker]\n# one hour\n"log.retention.ms" = 3600000\n"num.partitions" = 2\n'
    given.write_text(text)
    with running_cluster(data_dir, "--config", str(given)) as c:
        (backup,) = data_dir.glob("rlog.toml.*.bak")
        assert backup.read_text() == made
        (note,) = [line for line in c.up_err.splitlines() if "kept as" in line]
        assert str(given) in note and str(backup.resolve()) in note, c.up_err
        assert copy.read_text() == text
        assert ok(c.run("config", "path")).out == f"{copy}\n"
        ok(c.run("config", "set", "log.retention.ms", "7200000"))
        assert given.read_text() == text
        assert '"log.retention.ms" = 7200000' in copy.read_text()
        assert "# one hour" in copy.read_text()  # comments kept
        # rlogd watches the copy: a hand edit of it applies too.
        copy.write_text(copy.read_text().replace("7200000", "1800000"))
        deadline = time.monotonic() + 20
        while _config_value(c, "log.retention.ms") != 1800000:
            assert time.monotonic() < deadline, "the edit of the copy was not applied"
            time.sleep(0.2)
        # --config FILE while it runs, and FILE is not its copy: refused, nothing copied.
        refused = c.run("cluster", "up", "--config", str(given))
        one_line_error(refused, 1, "already running", "rlog config set")
        assert "1800000" in copy.read_text()

    # Up again without --config: the copy, as edited, is the cluster's config.
    with running_cluster(data_dir) as c:
        assert _config_value(c, "log.retention.ms") == 1800000
        assert _config_value(c, "num.partitions") == 2
        assert "kept as" not in c.up_err and "Copied" not in c.up_err
        assert len(list(data_dir.glob("rlog.toml.*.bak"))) == 1


def test_up_prints_table_and_export(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    base_port = free_base_port(1)
    pid = None
    try:
        up = rlog(
            "cluster",
            "up",
            "--base-port",
            str(base_port),
            "--data-dir",
            str(data_dir),
            data_dir=data_dir,
            timeout=UP_TIMEOUT_S,
        )
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = _rlogd_pid(data_dir)
        ok(up)
        lines = up.out.splitlines()
        assert lines[0].split() == ["NODE-ID", "STATUS", "KAFKA-ADDRESS"]
        assert lines[1].split() == ["1", "running", f"127.0.0.1:{base_port}"]
        assert f"export RLOG_BOOTSTRAP=127.0.0.1:{base_port}" in up.out
        launch = json.loads((data_dir / "cluster.json").read_text())
        assert launch["brokers"] == 1 and launch["base_port"] == base_port
    finally:
        stop_cluster(data_dir, pid)
    # cluster.json is kept: `up` with no flags restarts the same cluster, `purge` removes it.
    pid = None
    try:
        again = rlog("cluster", "up", data_dir=data_dir, timeout=UP_TIMEOUT_S)
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = _rlogd_pid(data_dir)
        assert f"127.0.0.1:{base_port}" in ok(again).out
        ok(rlog("cluster", "purge", "--yes", data_dir=data_dir))
        assert not data_dir.exists()
    finally:
        stop_cluster(data_dir, pid)


def _purge_on_a_terminal(data_dir: Path, answer: bytes) -> tuple[int, str]:
    """``rlog cluster purge`` with a pty as its terminal, answering its question with
    ``answer``; (exit code, what it showed)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*RLOG, "cluster", "purge"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=clean_env(data_dir),
        start_new_session=True,
    )
    os.close(terminal)
    shown = b""
    try:
        deadline = time.monotonic() + 30
        while b"[y/N]" not in shown and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.1)
            if ready:
                shown += os.read(controller, 4096)
        assert b"[y/N]" in shown, shown
        os.write(controller, answer)
        code = process.wait(timeout=COMMAND_TIMEOUT_S)
        with contextlib.suppress(OSError):  # the rest of its output, up to its exit
            while select.select([controller], [], [], 0.2)[0]:
                chunk = os.read(controller, 4096)
                if not chunk:
                    break
                shown += chunk
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    return code, shown.decode(errors="replace").replace("\r\n", "\n")


def test_purge_asks_first_and_needs_yes_without_a_terminal(cluster_factory) -> None:
    cluster = cluster_factory()
    data_dir = cluster.data_dir.resolve()
    # No terminal on stdin and no --yes: refused in one line, nothing touched.
    one_line_error(
        rlog("cluster", "purge", data_dir=data_dir), 2, "stdin is not a terminal", "--yes"
    )
    # On a terminal it asks, naming the data dir and what goes; anything but y keeps it all.
    code, shown = _purge_on_a_terminal(data_dir, b"n\n")
    assert code == 1, shown
    assert f"stop the running cluster and delete {data_dir}" in shown, shown
    assert "the brokers' logs" in shown and "Nothing removed" in shown, shown
    assert data_dir.exists() and cluster.process.poll() is None
    code, shown = _purge_on_a_terminal(data_dir, b"y\n")
    assert code == 0 and f"Removed {data_dir}." in shown, shown
    assert not data_dir.exists()
    assert cluster.process.wait(timeout=30) == 0  # stopped cleanly first
    # --yes (or -y) asks nothing: a data dir left by a stopped cluster goes at once.
    data_dir.mkdir()
    (data_dir / "cluster.json").write_text("{}")
    assert f"Removed {data_dir}." in ok(rlog("cluster", "purge", "-y", data_dir=data_dir)).err
    assert not data_dir.exists()


# -- topics -------------------------------------------------------------------------------


def test_topic_create_list_describe_delete(cluster: Cluster) -> None:
    name = new_topic("orders")
    create = ["topic", "create", name, "--partitions", "3", "--replication-factor", "1"]
    created = ok(cluster.run(*create, "--config", "retention.ms=3600000"))
    assert created.out.strip() == f"Created topic {name}."
    one_line_error(cluster.run("topic", "create", name, "-p", "3"), 6, "already exists")
    ok(cluster.run("topic", "create", name, "--if-not-exists"))

    assert name in ok(cluster.run("topic", "list")).out.splitlines()
    listed = {t["name"]: t for t in json.loads(ok(cluster.run("topic", "list", "--json")).out)}
    assert listed[name] == {"name": name, "partitions": 3, "replication_factor": 1}

    ok(cluster.run("produce", name, "--partition", "1", stdin="a\nb\n"))
    text = ok(cluster.run("topic", "describe", name)).out.splitlines()
    assert text[0].startswith(f"Topic: {name}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ")
    assert "retention.ms=3600000" in text[0]
    assert len(text) == 4
    for p, line in enumerate(text[1:]):
        assert line.startswith(f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\t")
        assert f"HW: {2 if p == 1 else 0}" in line

    document = json.loads(ok(cluster.run("topic", "describe", name, "--json")).out)
    assert document["topic"] == name and document["partition_count"] == 3
    partitions = document["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert {
            "partition",
            "leader",
            "leader_epoch",
            "replicas",
            "isr",
            "high_watermark",
            "log_end_offsets",
        } <= set(p)
        assert p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1]
    assert partitions[1]["high_watermark"] == 2
    assert partitions[1]["log_end_offsets"] == {"1": 2}

    assert ok(cluster.run("topic", "delete", name)).out.strip() == f"Deleted topic {name}."
    assert name not in ok(cluster.run("topic", "list")).out.splitlines()
    one_line_error(cluster.run("topic", "delete", name), 5, "unknown topic")


BROKER_DEFAULTS = """
[broker]
"num.partitions" = 3
"default.replication.factor" = 2
"""


def test_topic_create_minus_one_is_the_brokers_default(cluster_factory) -> None:
    cluster = cluster_factory(brokers=2, config_text=BROKER_DEFAULTS)

    def create(name: str, *flags: str) -> None:
        created = ok(rlog("topic", "create", name, *flags, data_dir=cluster.data_dir))
        assert created.out.strip() == f"Created topic {name}."

    def shape(name: str) -> tuple[int, set[int]]:
        document = json.loads(
            ok(rlog("topic", "describe", name, "--json", data_dir=cluster.data_dir)).out
        )
        partitions = document["partitions"]
        return len(partitions), {len(p["replicas"]) for p in partitions}

    create("defaults", "--partitions", "-1", "--replication-factor", "-1")
    assert shape("defaults") == (3, {2})  # num.partitions, default.replication.factor
    create("some-defaults", "-p", "2", "-r", "-1")
    assert shape("some-defaults") == (2, {2})
    create("other-defaults", "-p", "-1", "-r", "1")
    assert shape("other-defaults") == (3, {1})
    for flag in ("--partitions", "--replication-factor"):
        one_line_error(
            rlog("topic", "create", "zero", flag, "0", data_dir=cluster.data_dir),
            2,
            flag,
            "-1 for the brokers' default",
        )


def test_describe_missing_topic_is_one_line(cluster: Cluster) -> None:
    name = new_topic("nope")
    one_line_error(cluster.run("topic", "describe", name), 5, f"unknown topic '{name}'")
    one_line_error(cluster.run("topic", "describe", name, "--json"), 5, "unknown topic")
    # describe must not have auto-created it
    assert name not in ok(cluster.run("topic", "list")).out.splitlines()


# -- produce and consume ------------------------------------------------------------------


def _topic(cluster: Cluster, partitions: int = 1) -> str:
    name = new_topic()
    ok(cluster.run("topic", "create", name, "-p", str(partitions), "-r", "1"))
    return name


def test_produce_keys_then_consume_in_order(cluster: Cluster) -> None:
    name = _topic(cluster)
    lines = [f"key{i}:value {i}:with colon" for i in range(50)]
    ok(
        cluster.run(
            "produce", name, "--key-separator", ":", "--acks", "all", stdin="\n".join(lines) + "\n"
        )
    )
    got = ok(cluster.run("consume", name, "--from-beginning", "--format", r"%k=%v\n", "-e"))
    assert got.out.splitlines() == [line.replace(":", "=", 1) for line in lines]
    assert got.err.strip() == f"% Reached end of topic {name} [0] at offset 50: exiting"


def test_consume_format_tokens_and_json(cluster: Cluster) -> None:
    name = _topic(cluster)
    ok(cluster.run("produce", name, "-K", r"\t", "-H", "h=1", stdin="k\tv\nnokey\n"))
    got = ok(cluster.run("consume", name, "-o", "start", "-e", "-f", r"%t|%p|%o|%k|%s|%h\n"))
    assert got.out.splitlines() == [f"{name}|0|0|k|v|h=1", f"{name}|0|1||nokey|h=1"]
    # As kcat: %K is the key's length, -1 for a null key; %k of a null key prints nothing.
    lengths = ok(cluster.run("consume", name, "-o", "start", "-e", "-f", r"%K|%k|%S\n"))
    assert lengths.out.splitlines() == ["1|k|1", "-1||5"]
    as_json = ok(cluster.run("consume", name, "-o", "start", "-e", "--json"))
    records = [json.loads(line) for line in as_json.out.splitlines()]
    assert [list(r) for r in records] == [
        ["topic", "key", "value", "headers", "timestamp", "partition", "offset"]
    ] * 2
    assert records[0]["key"] == "k" and records[0]["value"] == "v"
    assert records[1]["key"] is None and records[1]["offset"] == 1
    assert records[0]["headers"] == [{"key": "h", "value": "1"}]
    assert records[0]["timestamp"] > 1_600_000_000_000
    # ... and %S is -1 for a null value (a tombstone), 0 for an empty one
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    producer.produce(name, key=b"gone", value=None)
    producer.produce(name, key=b"blank", value=b"")
    assert producer.flush(10) == 0
    lengths = ok(cluster.run("consume", name, "-o", "2", "-e", "-f", r"%k=%S\n"))
    assert lengths.out.splitlines() == ["gone=-1", "blank=0"]
    del producer  # before the cluster stops, or it logs its reconnects


def test_consume_offsets_and_max_messages(cluster: Cluster) -> None:
    name = _topic(cluster)
    ok(cluster.run("produce", name, "--acks", "1", stdin="".join(f"{i}\n" for i in range(10))))

    def values(*args: str) -> list[int]:
        return [int(v) for v in ok(cluster.run("consume", name, *args)).out.split()]

    assert values("--offset", "5", "-e") == [5, 6, 7, 8, 9]
    assert values("--offset", "-3", "-e") == [7, 8, 9]
    assert values("--offset", "+2", "--max-messages", "3") == [2, 3, 4]
    assert values("--offset", "2:4") == [2, 3]
    assert values("--offset", ":end") == list(range(10))
    assert values("--from-beginning", "--max-messages", "4") == [0, 1, 2, 3]
    assert values("--offset", "end", "-e") == []
    one_line_error(cluster.run("consume", name, "--offset", "soon"), 2, "--offset")


def test_partitions_and_compression(cluster: Cluster) -> None:
    name = _topic(cluster, partitions=3)
    for p in range(3):
        ok(
            cluster.run(
                "produce",
                name,
                "--partition",
                str(p),
                "--compression",
                "zstd",
                "--linger-ms",
                "1",
                stdin=f"p{p}a\np{p}b\n",
            )
        )
    got = ok(cluster.run("consume", name, "-o", "start", "-p", "2", "-e", "-f", r"%p:%v\n"))
    assert got.out.splitlines() == ["2:p2a", "2:p2b"]
    every = ok(cluster.run("consume", name, "-o", "start", "-e", "-f", r"%p:%o:%v\n"))
    assert sorted(every.out.splitlines()) == sorted(
        f"{p}:{o}:p{p}{c}" for p in range(3) for o, c in enumerate("ab")
    )
    assert every.err.strip().splitlines()[-1].endswith(": exiting")
    one_line_error(cluster.run("produce", name, "--partition", "7", stdin="x\n"), 5, "partition 7")
    one_line_error(cluster.run("consume", name, "--partition", "7"), 5, "partition 7")


def test_unknown_topic_errors(cluster: Cluster) -> None:
    name = new_topic("ghost")
    one_line_error(cluster.run("consume", name, "-e"), 5, f"unknown topic '{name}'")
    no_create = cluster.run("produce", name, "-X", "allow.auto.create.topics=false", stdin="x\n")
    one_line_error(no_create, 5, "unknown topic")


def test_bad_flags_are_one_line(cluster: Cluster) -> None:
    one_line_error(cluster.run("produce", "t", "--acks", "2", stdin=""), 2, "--acks")
    one_line_error(cluster.run("consume", "t", "--bogus"), 2, "--bogus")
    one_line_error(cluster.run("topic", "create", "t", "--config", "novalue"), 2, "key=value")
    one_line_error(cluster.run("consume", "t", "--format", "%q"), 2, "%q")


def test_unreachable_bootstrap(tmp_path: Path) -> None:
    port = free_base_port(1)
    result = rlog("-b", f"127.0.0.1:{port}", "topic", "list", data_dir=tmp_path)
    one_line_error(result, 4, "cannot reach", f"127.0.0.1:{port}")


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list"],
        ["topic", "describe", "t"],
        ["topic", "create", "t"],
        ["produce", "t"],
        ["consume", "t", "-e"],
        ["cluster", "status"],
        ["bench", "produce", "--topic", "t", "--num-records", "1"],
        ["chaos", "restart", "controller"],
        ["topic", "elect-leaders"],
    ],
)
def test_commands_with_cluster_down(tmp_path: Path, args: list[str]) -> None:
    data_dir = tmp_path / "never-started"
    result = rlog(*args, data_dir=data_dir, stdin="x\n")
    one_line_error(result, 3, "not running", str(data_dir), "rlog cluster up")


# -- replication: describe, elect-leaders, chaos -----------------------------------------

REPLICATED = """
[broker]
"broker.session.timeout.ms" = 3000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 3000
"replica.fetch.backoff.ms" = 100
"""


def _describe_json(c: Cluster, name: str) -> dict:
    return json.loads(ok(c.run("topic", "describe", name, "--json")).out)


def _wait_describe(c: Cluster, name: str, what: str, check, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    document: dict = {}
    while time.monotonic() < deadline:
        document = _describe_json(c, name)
        if check(document):
            return document
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last describe: {document}")


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("rlog-cli-3")
    config = base / "replicated.toml"
    config.write_text(REPLICATED)
    with running_cluster(base / "data", "--config", str(config), brokers=3) as running:
        yield running


def test_describe_shows_each_replicas_log_end_offset_and_lag(cluster3: Cluster) -> None:
    c = cluster3
    name = new_topic("replicated")
    ok(c.run("topic", "create", name, "--partitions", "2", "--replication-factor", "3"))
    ok(c.run("produce", name, "--partition", "0", "--acks", "all", stdin="a\nb\nc\n"))
    caught_up = {"1": 3, "2": 3, "3": 3}
    document = _wait_describe(
        c,
        name,
        "every replica of partition 0 at offset 3",
        lambda d: d["partitions"][0]["log_end_offsets"] == caught_up,
    )
    first = document["partitions"][0]
    assert {
        "partition",
        "leader",
        "leader_epoch",
        "replicas",
        "isr",
        "high_watermark",
        "log_end_offsets",
    } <= set(first)
    assert first["high_watermark"] == 3 and sorted(first["replicas"]) == [1, 2, 3]
    assert first["leader"] in first["replicas"] and first["leader_epoch"] >= 0
    assert sorted(first["isr"]) == [1, 2, 3]
    text = ok(c.run("topic", "describe", name)).out.splitlines()
    assert text[1].startswith(f"\tTopic: {name}\tPartition: 0\tLeader: {first['leader']}\t")
    assert f"\tLeaderEpoch: {first['leader_epoch']}\tLSO: 3\tHW: 3\tLEO: " in text[1]
    assert "\tLag: " in text[1] and "=0" in text[1].split("Lag: ")[1]

    # A follower that is down has no LEO to show; back up, it catches up again.
    follower = next(r for r in first["replicas"] if r != first["leader"])
    stopped = ok(c.run("chaos", "terminate", f"broker-{follower}")).out
    assert f"terminated broker-{follower}" in stopped
    try:
        document = _describe_json(c, name)
        assert document["partitions"][0]["log_end_offsets"][str(follower)] is None
        line = ok(c.run("topic", "describe", name)).out.splitlines()[1]
        assert f"{follower}=-" in line.split("LEO: ")[1]
    finally:
        ok(c.run("chaos", "restart", f"broker-{follower}"))
    _wait_describe(
        c,
        name,
        f"broker-{follower} to catch up",
        lambda d: d["partitions"][0]["log_end_offsets"] == caught_up,
    )


def test_elect_leaders_prints_one_line_per_partition(cluster3: Cluster) -> None:
    c = cluster3
    name = new_topic("elect")
    ok(c.run("topic", "create", name, "--partitions", "3", "--replication-factor", "3"))
    result = ok(c.run("topic", "elect-leaders", "--topic", name))
    lines = result.out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{name}-{p}" for p in range(3)]
    document = json.loads(
        ok(c.run("topic", "elect-leaders", "--topic", name, "--partition", "1", "--json")).out
    )
    assert document["election_type"] == "preferred"
    (only,) = document["partitions"]
    assert only["topic"] == name and only["partition"] == 1
    assert only["error"] in (None, "ELECTION_NOT_NEEDED")
    one_line_error(c.run("topic", "elect-leaders", "--topic", name, "--partition", "9"), 5)
    one_line_error(c.run("topic", "elect-leaders", "--partition", "1"), 2, "--topic")
    one_line_error(c.run("topic", "elect-leaders", "--topic", new_topic("nope")), 5, "unknown")


def test_describe_an_offline_partition(cluster3: Cluster) -> None:
    c = cluster3
    name = new_topic("single")
    ok(c.run("topic", "create", name, "--partitions", "1", "--replication-factor", "1"))
    leader = _wait_describe(c, name, "a leader", lambda d: d["partitions"][0]["leader"] >= 1)[
        "partitions"
    ][0]["leader"]
    ok(c.run("chaos", "terminate", f"broker-{leader}"))
    try:
        document = _wait_describe(
            c, name, "the partition to go offline", lambda d: d["partitions"][0]["leader"] == -1
        )
        offline = document["partitions"][0]
        assert offline["high_watermark"] is None
        assert offline["log_end_offsets"] == {str(leader): None}
        line = ok(c.run("topic", "describe", name)).out.splitlines()[1]
        assert "\tLeader: none\t" in line
        unavailable = ok(c.run("topic", "describe", name, "--unavailable-partitions")).out
        assert unavailable.splitlines() == [line]
    finally:
        ok(c.run("chaos", "restart", f"broker-{leader}"))
