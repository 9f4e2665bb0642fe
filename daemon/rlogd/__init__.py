"""rlogd: run a local rlog cluster in the foreground and keep its processes alive.

`rlogd --brokers N --data-dir DIR [--base-port P] [--config FILE]` starts the controller (on
127.0.0.1:P+N unless the config names its port, its metadata log in DIR/controller) and then
broker-1..broker-N (broker-i on 127.0.0.1:P+i-1, its logs in DIR/broker-i), each a subprocess
with its output in DIR/logs. It restarts a process that dies per the config's restart policy, and
on SIGTERM or SIGINT stops the brokers cleanly (each flushes its logs and writes its checkpoints)
and then the controller. The cluster's id is made once per data dir and kept in
DIR/meta.properties. While it runs, DIR/rlogd.json says where everything is and how each
process fares (pid, state, restarts, CPU %, resident memory, open file descriptors, uptime;
sampled every second), and the control socket DIR/rlogd.sock (JSON lines) answers status
requests and kills, terminates, pauses, resumes or restarts a process on request; `rlog` uses
both. Every process journals what happens to the cluster in DIR/events (rlogd: processes
started, exited, restarted; the controller: brokers fenced, leaders elected, ISRs shrunk or
expanded; brokers: replicas truncated), which `rlog events` reads.

One cluster may span several hosts, each running its part under its own rlogd with the same
config: `--nodes controller,broker-1` on one host, `--nodes broker-2 --cluster-id ID` on
another (ID: the cluster id the controller's host made, in its DIR/meta.properties). The
config's [controller] and [broker.N] tables say where each of those binds and what it
advertises; brokers reach the controller at its advertised address and keep trying, logging
that they cannot, until it answers. Each rlogd supervises, restarts and answers for its own
processes only, and keeps its own data dir; a listener bound to an address its host does not
have stops rlogd at start, naming the address. A broker whose host's rlogd cannot tell the
controller it exited is fenced after broker.session.timeout.ms.
"""

from rlog.daemon.rlogd.main import build_parser, main

__all__ = ["build_parser", "main"]
