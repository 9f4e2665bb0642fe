"""The data directory's layout: the name of every file and directory rlog keeps in it.

rlogd, its children and the `rlog` command all find each other through these files, so their
names are spelled here once::

    DATA_DIR/
      rlogd.json        the running cluster's status (rlogd writes it, removes it on exit)
      rlogd.sock        rlogd's control socket
      rlogd.lock        held by the running rlogd: one rlogd per data dir
      rlogd.log         rlogd's output when `rlog cluster up` started it
      cluster.json      rlogd's launch parameters, kept after exit
      rlog.toml         the cluster's own config: `rlog cluster up` copies --config here
      meta.properties   the cluster id (also in controller/ and each broker-N/)
      controller/       the controller's metadata log
      broker-N/         broker N's logs, plus faults.json (its chaos rules), faults.applied.json
                        (the rules it last put in force) and traffic.json
      logs/NAME.log     each process's own output (controller.log, broker-N.log)
      events/NAME.jsonl each process's event journal (rlogd, controller, broker-N)

Only names live here: what goes in each file belongs to the module that writes it.
"""

from __future__ import annotations

from pathlib import Path

STATUS_FILE = "rlogd.json"
SOCKET_FILE = "rlogd.sock"
LOCK_FILE = "rlogd.lock"
RLOGD_LOG_FILE = "rlogd.log"
LAUNCH_FILE = "cluster.json"
CONFIG_FILE = "rlog.toml"
META_FILE = "meta.properties"
CONTROLLER = "controller"  # the controller's process name, also its directory's and journal's
CONTROLLER_DIR = CONTROLLER
LOGS_DIR = "logs"
EVENTS_DIR = "events"
JOURNAL_SUFFIX = ".jsonl"
# In each broker's own directory.
FAULTS_FILE = "faults.json"
FAULTS_APPLIED_FILE = "faults.applied.json"
TRAFFIC_FILE = "traffic.json"


def status_path(data_dir: Path) -> Path:
    return data_dir / STATUS_FILE


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_FILE


def lock_path(data_dir: Path) -> Path:
    return data_dir / LOCK_FILE


def rlogd_log_path(data_dir: Path) -> Path:
    return data_dir / RLOGD_LOG_FILE


def launch_path(data_dir: Path) -> Path:
    return data_dir / LAUNCH_FILE


def config_path(data_dir: Path) -> Path:
    """The cluster's own copy of its config, the file rlogd watches and `rlog config` edits."""
    return data_dir / CONFIG_FILE


def config_backup_path(data_dir: Path, stamp: str) -> Path:
    """Where a replaced copy of the config is kept (``stamp``: when it was replaced)."""
    return data_dir / f"{CONFIG_FILE}.{stamp}.bak"


def meta_path(directory: Path) -> Path:
    """The meta.properties of the data dir, or of a broker's or the controller's directory."""
    return directory / META_FILE


def controller_dir(data_dir: Path) -> Path:
    return data_dir / CONTROLLER_DIR


def broker_name(broker_id: int) -> str:
    """A broker's process name, which is also its directory's name (and its journal's)."""
    return f"broker-{broker_id}"


def broker_dir(data_dir: Path, broker_id: int) -> Path:
    return data_dir / broker_name(broker_id)


def process_log_path(data_dir: Path, process: str) -> Path:
    """Where a process (``controller``, ``broker-N``) writes its own output."""
    return data_dir / LOGS_DIR / f"{process}.log"


def events_dir(data_dir: Path) -> Path:
    return Path(data_dir) / EVENTS_DIR


def journal_path(data_dir: Path, source: str) -> Path:
    """Where ``source`` (rlogd, controller, broker-N) writes its events in ``data_dir``."""
    return events_dir(data_dir) / f"{source}{JOURNAL_SUFFIX}"


def faults_path(broker_directory: Path) -> Path:
    """A broker's chaos rules, in its own directory (see rlog.daemon.faults_file)."""
    return broker_directory / FAULTS_FILE


def faults_applied_path(faults_file: Path) -> Path:
    """Where the broker that reads `faults_file` acknowledges the rules it put in force."""
    return faults_file.with_name(FAULTS_APPLIED_FILE)


def traffic_path(broker_directory: Path) -> Path:
    """A broker's traffic counters, in its own directory."""
    return broker_directory / TRAFFIC_FILE
