"""The rlogd command: its arguments, the config they make, and the run under the data dir's
lock."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path

from rlog.daemon.config import ConfigError, RlogConfig, load_config, with_cluster_flags
from rlog.daemon.data_dir import meta_path, status_path
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.rlogd.data_files import (
    adopt_cluster_id,
    cluster_id_of,
    lock_data_dir,
    write_launch_record,
)
from rlog.daemon.rlogd.lifecycle import Rlogd
from rlog.daemon.rlogd.nodes import (
    check_cluster_id,
    foreign_addresses,
    parse_nodes,
    runs_controller,
)

log = logging.getLogger("rlogd")


def build_parser() -> argparse.ArgumentParser:
    """rlogd's command line (rlogd(8) is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="rlogd", description="Run a local rlog cluster in the foreground."
    )
    parser.add_argument("--brokers", type=int, default=None, help="number of brokers (default 1)")
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="where the cluster keeps its data"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="broker-i listens on BASE_PORT+i-1, the controller on BASE_PORT+BROKERS unless "
        "the config sets controller_port (default 9092)",
    )
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    parser.add_argument(
        "--nodes",
        default=None,
        metavar="NAMES",
        help="run only these of the cluster's processes, comma-separated (controller, "
        "broker-N), the others running on other hosts under their own rlogd with the same "
        "config; their listeners come from its [controller] and [broker.N] tables (default: "
        "every process)",
    )
    parser.add_argument(
        "--cluster-id",
        default=None,
        metavar="ID",
        help="the id of the cluster to join, for a data dir that has none yet: needed where "
        "--nodes leaves out the controller (default: the data dir's, made on first use)",
    )
    return parser


def cluster_flags(args: argparse.Namespace) -> dict[str, int]:
    """The [cluster] keys rlogd's flags set; they stay over the file's values, edits included."""
    flags: dict[str, int] = {}
    if args.brokers is not None:
        flags["brokers"] = args.brokers
    if args.base_port is not None:
        flags["base_port"] = args.base_port
    return flags


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rlogd %(levelname)s: %(message)s")
    flags = cluster_flags(args)
    try:
        config = with_cluster_flags(load_config(args.config), flags)
        nodes = parse_nodes(args.nodes, config)
        given_cluster_id = check_cluster_id(args.cluster_id) if args.cluster_id else None
    except ConfigError as error:
        print(f"rlogd: {error}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    foreign = foreign_addresses(config, nodes)
    if foreign:
        for problem in foreign:
            print(f"rlogd: {problem}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    data_dir: Path = args.data_dir.resolve()
    config_path = args.config.resolve() if args.config else None
    data_dir.mkdir(parents=True, exist_ok=True)
    owner = data_dir.stat().st_uid
    if owner != os.geteuid():
        # Its logs, keys and control socket would be another user's to read or replace.
        print(
            f"rlogd: {data_dir} belongs to uid {owner}, not to this user ({os.geteuid()}); "
            "run rlogd as its owner or choose another --data-dir",
            file=sys.stderr,
        )
        sys.exit(ExitCode.CONFIG)
    lock = lock_data_dir(data_dir)
    if lock is None:
        print(f"rlogd: another rlogd is already running for {data_dir}", file=sys.stderr)
        sys.exit(ExitCode.USAGE)
    if given_cluster_id is not None:
        try:
            cluster_id = adopt_cluster_id(data_dir, given_cluster_id)
        except ValueError as error:
            print(f"rlogd: {error}", file=sys.stderr)
            sys.exit(ExitCode.CONFIG)
    elif not runs_controller(nodes) and not meta_path(data_dir).exists():
        # A made-up id would only be refused by the controller (INCONSISTENT_CLUSTER_ID).
        print(
            f"rlogd: --nodes {args.nodes} runs no controller here and {data_dir} belongs to no "
            "cluster yet: give the cluster's id with --cluster-id (rlog cluster status on the "
            "controller's host shows it)",
            file=sys.stderr,
        )
        sys.exit(ExitCode.CONFIG)
    else:
        cluster_id = cluster_id_of(data_dir)
    write_launch_record(data_dir, config, config_path)
    code = asyncio.run(_serve(data_dir, config, config_path, cluster_id, flags, nodes))
    log.info("rlogd stopped")
    sys.exit(code)


async def _serve(
    data_dir: Path,
    config: RlogConfig,
    config_path: Path | None,
    cluster_id: str,
    flags: dict[str, int],
    nodes: frozenset[str] | None,
) -> int:
    rlogd = Rlogd(data_dir, config, config_path, cluster_id, flags, nodes)
    try:
        return await rlogd.run()
    finally:
        # rlogd.json says a cluster runs here: gone once it does not (cluster.json stays).
        with contextlib.suppress(FileNotFoundError):
            status_path(data_dir).unlink()
