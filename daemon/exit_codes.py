"""Exit codes the daemon processes share, so rlogd knows which failures a restart cannot fix."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    # sysexits.h EX_CONFIG: bad configuration or a port in use. Restarting would fail the same way.
    CONFIG = 78
