"""Part of a cluster on each host: the [controller] and [broker.N] tables, rlogd's --nodes and
--cluster-id, and the refusals that name what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlog.daemon.config import ConfigError, parse_config
from rlog.daemon.config_reload import set_key
from rlog.daemon.control import ControlError
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.listeners import Listener, broker_listeners, controller_listener
from rlog.daemon.rlogd import main as rlogd_main
from rlog.daemon.rlogd.cluster import Cluster
from rlog.daemon.rlogd.data_files import adopt_cluster_id, new_cluster_id
from rlog.daemon.rlogd.nodes import check_cluster_id, foreign_addresses, parse_nodes

# Three hosts: A runs the controller and broker 1, B broker 2, C broker 3.
THREE_HOSTS = """[cluster]
brokers = 3

[controller]
listeners = "CONTROLLER://0.0.0.0:9093"
"advertised.listeners" = "CONTROLLER://host-a.example:9093"

[broker.1]
listeners = "PLAINTEXT://10.0.0.1:9092"

[broker.2]
listeners = "PLAINTEXT://0.0.0.0:9092"
"advertised.listeners" = "PLAINTEXT://host-b.example:9092"

[broker.3]
listeners = "PLAINTEXT://10.0.0.3:9092"
"""
NOT_HERE = "203.0.113.7"  # TEST-NET-3: never an address of the machine running the tests


def _argv_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_brokers_own_table_binds_and_advertises_its_ports_as_written() -> None:
    settings = parse_config(THREE_HOSTS).broker.listener_settings
    # Not shifted by the broker id: each host has its address to itself.
    assert broker_listeners(settings, 3, "127.0.0.1", 9094) == [
        Listener("PLAINTEXT", "PLAINTEXT", "10.0.0.3", 9092, "10.0.0.3", 9092)
    ]
    # Bound on every address of its host, advertised under the name the others reach.
    assert broker_listeners(settings, 2, "127.0.0.1", 9093) == [
        Listener("PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9092, "host-b.example", 9092)
    ]
    controller = controller_listener(settings, "127.0.0.1", 9095)
    assert (controller.bind_host, controller.bind_port) == ("0.0.0.0", 9093)
    assert (controller.host, controller.port) == ("host-a.example", 9093)


def test_brokers_without_a_table_keep_the_shared_listeners_shifted_by_their_id() -> None:
    text = """[cluster]
brokers = 3
[broker]
listeners = "PLAINTEXT://127.0.0.1:9092"
[broker.3]
listeners = "PLAINTEXT://10.0.0.3:9092"
"""
    settings = parse_config(text).broker.listener_settings
    (second,) = broker_listeners(settings, 2, "127.0.0.1", 9093)
    (third,) = broker_listeners(settings, 3, "127.0.0.1", 9094)
    assert (second.bind_host, second.bind_port) == ("127.0.0.1", 9093)
    assert (third.bind_host, third.bind_port) == ("10.0.0.3", 9092)
    # Without a [controller] table the controller stays where rlogd puts it.
    controller = controller_listener(settings, "127.0.0.1", 9095)
    assert (controller.bind_host, controller.port) == ("127.0.0.1", 9095)


@pytest.mark.parametrize(
    ("tables", "says"),
    [
        ('[broker.2]\nlisteners = "PLAINTEXT://0.0.0.0:9092"', "binds 0.0.0.0 and advertised"),
        (
            '[controller]\nlisteners = "CONTROLLER://0.0.0.0:9093"',
            r"\[controller\] listener CONTROLLER binds 0.0.0.0",
        ),
        ('[broker.2]\n"advertised.listeners" = "PLAINTEXT://b:9092"', r"\[broker.2\] needs"),
        ('[broker.2]\nlisteners = "PLAINTEXT://b:9092"\nrack = "r1"', r"\[broker.2\] rack"),
        ("[broker.2]\nlisteners = 9092", "expected a string"),
        ('[broker.0]\nlisteners = "PLAINTEXT://b:9092"', r"\[broker.N\], N its id"),
        ('[broker.two]\nlisteners = "PLAINTEXT://b:9092"', r"\[broker.N\], N its id"),
        ('[broker.4]\nlisteners = "PLAINTEXT://d:9092"', "the cluster has 3 broker"),
        ('[controller]\nlisteners = "PLAINTEXT://a:9093"', "the controller has one listener"),
        ('[broker.2]\nlisteners = "CONTROLLER://b:9093"', "are the controller's"),
        (
            '[broker.2]\nlisteners = "PLAINTEXT://b:9092"\n'
            '"advertised.listeners" = "EXTERNAL://x:1"',
            r"\[broker.2\] advertised.listeners names \['EXTERNAL'\]",
        ),
        (
            '[broker.1]\nlisteners = "PLAINTEXT://10.0.0.1:9092"\n'
            '[broker.2]\nlisteners = "PLAINTEXT://10.0.0.1:9092"',
            "10.0.0.1:9092 is both broker 1's PLAINTEXT and broker 2's PLAINTEXT",
        ),
    ],
)
def test_bad_node_tables_are_refused_naming_the_table(tables: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_config(f"[cluster]\nbrokers = 3\n\n{tables}\n")


def test_the_same_port_on_different_hosts_is_no_clash() -> None:
    parse_config(THREE_HOSTS)  # every broker on 9092, each at its own address
    shared = '[cluster]\nbrokers = 2\n[broker.2]\nlisteners = "PLAINTEXT://127.0.0.1:9092"\n'
    # Broker 1 has no table, so it is on rlogd's host and port: 127.0.0.1:9092 as well.
    with pytest.raises(ConfigError, match=re.escape("127.0.0.1:9092 is both broker 1's")):
        parse_config(shared)


def test_nodes_names_the_clusters_processes() -> None:
    config = parse_config(THREE_HOSTS)
    assert parse_nodes(None, config) is None
    assert parse_nodes("controller, broker-1", config) == {"controller", "broker-1"}
    with pytest.raises(ConfigError, match="broker-4; the cluster's processes are controller, "):
        parse_nodes("broker-4", config)
    with pytest.raises(ConfigError, match="names no process"):
        parse_nodes(",", config)


def test_a_cluster_id_has_kafkas_form() -> None:
    made = new_cluster_id()
    assert check_cluster_id(made) == made
    for bad in ("my-cluster", made[:-1], made + "A", "-" + made[1:], "%" * 22):
        with pytest.raises(ConfigError, match="is not a cluster id"):
            check_cluster_id(bad)


def test_a_data_dir_keeps_the_cluster_it_joined(tmp_path: Path) -> None:
    first, other = new_cluster_id(), new_cluster_id()
    assert adopt_cluster_id(tmp_path, first) == first
    assert adopt_cluster_id(tmp_path, first) == first  # again, as at every restart
    with pytest.raises(ValueError, match=f"belongs to cluster {first}, not {other}"):
        adopt_cluster_id(tmp_path, other)


def test_only_this_hosts_nodes_must_have_their_addresses_here() -> None:
    text = THREE_HOSTS.replace("10.0.0.3", NOT_HERE).replace("10.0.0.1", "127.0.0.1")
    config = parse_config(text)
    # Broker 3 binds an address this machine lacks: fine while another host runs it.
    assert foreign_addresses(config, frozenset({"controller", "broker-1", "broker-2"})) == []
    (problem,) = foreign_addresses(config, frozenset({"broker-3"}))
    assert problem.startswith(
        f"broker-3's listener PLAINTEXT binds {NOT_HERE}, which is not an address of this host"
    )
    unresolvable = parse_config(text.replace(NOT_HERE, "no-such-host.invalid"))
    (problem,) = foreign_addresses(unresolvable, frozenset({"broker-3"}))
    assert "binds no-such-host.invalid, which does not resolve" in problem


def test_rlogd_runs_only_its_nodes_and_reaches_the_controller_where_it_is_advertised(
    tmp_path: Path,
) -> None:
    config = parse_config(THREE_HOSTS)
    host_b = Cluster.create(tmp_path, config, None, new_cluster_id(), nodes=frozenset({"broker-2"}))
    assert host_b.controller is None
    assert [child.name for child in host_b.processes] == ["broker-2"]
    (broker,) = host_b.brokers
    assert _argv_value(broker.argv, "--controller") == "host-a.example:9093"
    assert (broker.host, broker.port) == ("127.0.0.1", 9092)  # a wildcard bind: via loopback
    assert host_b.controller_address()[:2] == ("host-a.example", 9093)
    assert host_b.status_document()["controller"] is None
    with pytest.raises(
        ControlError, match="broker-3 runs on another host: this rlogd runs broker-2"
    ):
        host_b.process("broker-3")

    host_a = Cluster.create(
        tmp_path, config, None, new_cluster_id(), nodes=frozenset({"controller", "broker-1"})
    )
    assert host_a.controller is not None
    assert _argv_value(host_a.controller.argv, "--host") == "0.0.0.0"
    assert _argv_value(host_a.controller.argv, "--port") == "9093"
    assert [child.name for child in host_a.brokers] == ["broker-1"]


def test_one_host_runs_every_process_as_before(tmp_path: Path) -> None:
    config = parse_config("[cluster]\nbrokers = 2\nbase_port = 19092\n")
    cluster = Cluster.create(tmp_path, config, None, new_cluster_id())
    assert cluster.runs_every_node
    assert [child.name for child in cluster.processes] == ["controller", "broker-1", "broker-2"]
    controller = cluster.processes[0]
    assert _argv_value(controller.argv, "--host") == "127.0.0.1"
    assert _argv_value(controller.argv, "--port") == "19094"
    for broker in cluster.brokers:
        assert _argv_value(broker.argv, "--controller") == "127.0.0.1:19094"
        assert broker.host == "127.0.0.1"
    assert [broker.port for broker in cluster.brokers] == [19092, 19093]


def test_rlogd_without_the_controller_needs_the_cluster_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(THREE_HOSTS.replace("0.0.0.0", "127.0.0.1"))
    data_dir = tmp_path / "host-b"
    with pytest.raises(SystemExit) as exited:
        rlogd_main(["--config", str(config), "--data-dir", str(data_dir), "--nodes", "broker-2"])
    assert exited.value.code == ExitCode.CONFIG
    error = capsys.readouterr().err
    assert "--nodes broker-2 runs no controller here" in error
    assert "give the cluster's id with --cluster-id" in error
    assert not (data_dir / "meta.properties").exists()  # no made-up id left behind


def test_a_node_table_survives_rlog_config_set() -> None:
    edited = set_key(
        '[cluster]\nbrokers = 2\n\n[broker.2]\nlisteners = "PLAINTEXT://10.0.0.2:9092"\n',
        "min.insync.replicas",
        "2",
    )
    config = parse_config(edited)
    assert config.broker.min_insync_replicas == 2
    assert config.broker.node_listeners.broker(2) is not None


def test_the_shipped_three_hosts_example_is_a_valid_config() -> None:
    example = Path(__file__).resolve().parents[2] / "configs" / "three-hosts.toml"
    config = parse_config(example.read_text(), str(example))
    settings = config.broker.listener_settings
    advertised = [broker_listeners(settings, i, "127.0.0.1", 9092)[0].host for i in (1, 2, 3)]
    assert advertised == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert controller_listener(settings, "127.0.0.1", 9095).host == "10.0.0.1"


def test_an_ssl_listener_in_a_node_table_needs_the_keystore_too() -> None:
    """Broker 1's listeners are plaintext; broker 2's own table makes its listener SSL."""
    text = """[cluster]
brokers = 2
[broker]
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT"
[broker.1]
listeners = "PLAINTEXT://127.0.0.1:9092"
[broker.2]
listeners = "SSL://127.0.0.1:9095"
"""
    with pytest.raises(ConfigError, match=re.escape("an SSL listener needs ssl.keystore")):
        parse_config(text)
