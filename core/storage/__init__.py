"""rlog.core.storage."""
