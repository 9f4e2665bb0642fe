"""rlog.core.protocol."""
