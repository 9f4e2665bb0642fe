"""rlog.core."""
