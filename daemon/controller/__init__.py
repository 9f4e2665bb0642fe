"""The controller process: the sans-IO `rlog.core.controller.Controller` behind a Kafka listener.

main.py starts it (argparse, metadata log replay, signals); service.py turns its `Ready`s into
fsync'd metadata log batches and answers; handlers.py and admin.py map the Kafka APIs to its
requests; record_lines.py writes one log line per committed record.
"""
