"""Exit codes the daemon processes share, so rlogd knows which failures a restart cannot fix."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    # sysexits.h EX_CONFIG: bad configuration or a port in use. Restarting would fail the same way.
    CONFIG = 78


# A broker's alone (rlogd never exits with it, so it is not in rlogd(8)'s ExitCode table).
# sysexits.h EX_TEMPFAIL: the broker's log dir had failed, its disk works again, and it stopped
# so that a new process recovers the dir, as Kafka needs a restart for that too; rlogd restarts
# it at once, whatever the restart policy.
LOG_DIR_RECOVERED = 75
