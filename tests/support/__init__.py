"""Helpers shared by the integration tests: clusters started through rlogd, real clients."""
