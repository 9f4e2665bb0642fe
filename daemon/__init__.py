"""rlog.daemon."""
