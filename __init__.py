"""rlog: a Kafka-compatible replicated log you run, break and repair on one machine."""

__version__ = "0.1.0"
