"""rlog.daemon.broker."""
