"""Every bound rlog enforces, in one place, with the reason beside it.

TigerBeetle's habit: a limit on everything, and the relations between limits asserted at import
time so a bad edit fails loudly instead of at 3 a.m.
"""

# A request frame larger than this is refused from its 4-byte size prefix, before its bytes are
# read or allocated (Kafka's socket.request.max.bytes default: 100 MiB).
SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024

# A record batch larger than this is refused with MESSAGE_TOO_LARGE (Kafka's message.max.bytes
# default, 1 MiB + 12 bytes of log overhead).
MESSAGE_MAX_BYTES = 1024 * 1024 + 12

# Segment files roll at this size (log.segment.bytes). Positions in the offset index are 32-bit,
# so a segment can never pass 2 GiB.
LOG_SEGMENT_BYTES_DEFAULT = 1024 * 1024 * 1024
LOG_SEGMENT_BYTES_MAX = 2**31 - 1
# The smallest segment.bytes Kafka accepts (one legacy v0 record's overhead).
LOG_SEGMENT_BYTES_MIN = 14

# One sparse index entry per this many log bytes (log.index.interval.bytes).
LOG_INDEX_INTERVAL_BYTES_DEFAULT = 4096

# An index file holds at most this many bytes (log.index.size.max.bytes); a full index rolls the
# segment.
LOG_INDEX_SIZE_MAX_BYTES = 10 * 1024 * 1024

# A batch whose records inflate past this is refused (CORRUPT_MESSAGE from a producer: the leader
# inflates every compressed client batch to check its records), so a small compressed bomb
# cannot exhaust memory.
DECOMPRESSED_BATCH_MAX_BYTES = 64 * 1024 * 1024

# Recovery and index rebuilds read the log in chunks of this size: large enough that a chunk holds
# many batches, small enough to keep the copy cheap.
LOG_RECOVERY_READ_BYTES = 1024 * 1024

# Fetch requests a broker parks while waiting for data (long polling). More are answered at once.
FETCH_WAITING_MAX = 10_000

# A long-polling fetch waits at most this long, whatever the client asks (fetch.max.wait.ms is
# 500 ms by default in every client; a minute bounds a hostile value).
FETCH_MAX_WAIT_MS_MAX = 60_000

# Requests decoded but not yet answered on one connection. Responses go out in request order, so
# a pipelining client beyond this is not read from until earlier answers are sent.
CONNECTION_INFLIGHT_MAX = 100

# Partitions one topic may have; bounds what CreateTopics can ask one broker to open.
TOPIC_PARTITIONS_MAX = 10_000

# Producer state: Kafka keeps the last five batches per producer per partition to answer retries
# (max.in.flight.requests.per.connection <= 5 with idempotence).
PRODUCER_BATCHES_RETAINED = 5

assert MESSAGE_MAX_BYTES < SOCKET_REQUEST_MAX_BYTES
assert LOG_SEGMENT_BYTES_DEFAULT <= LOG_SEGMENT_BYTES_MAX
assert MESSAGE_MAX_BYTES < LOG_SEGMENT_BYTES_DEFAULT
assert LOG_INDEX_INTERVAL_BYTES_DEFAULT < LOG_SEGMENT_BYTES_DEFAULT
assert LOG_SEGMENT_BYTES_MIN <= LOG_SEGMENT_BYTES_DEFAULT
# One append (at most one request) into an empty segment must keep every position 32-bit.
assert SOCKET_REQUEST_MAX_BYTES < LOG_SEGMENT_BYTES_MAX
assert MESSAGE_MAX_BYTES < DECOMPRESSED_BATCH_MAX_BYTES

# A response frame larger than this is refused by ClientConnection (tests and tools) from its size
# prefix. Fetch answers are bounded by the client's fetch.max.bytes (50 MiB by default), so the
# broker's own request bound is a generous ceiling.
CLIENT_RESPONSE_MAX_BYTES = SOCKET_REQUEST_MAX_BYTES
