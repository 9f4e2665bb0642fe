"""``rlog verify``: check a Kafka-protocol cluster the way Jepsen's Kafka workload does.

A run records a history of operations (`history`), which the checker (`checker`) reads to name
anomalies and to say whether any of them breaks what the run's settings promise (`promises`).
`wellformed` pairs each invocation with its completion and refuses histories that cannot be
judged; `facts` derives what the log held from them; `detect_log` and `detect_order` are the
detectors; `verdict` holds the result and its table.
"""
