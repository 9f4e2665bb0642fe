"""rlog.cli."""
