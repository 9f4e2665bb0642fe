"""Time the protocol hot paths: decode a Produce v8 request, encode a Fetch v11 response.

    python benchmarks/bench_codec.py

Prints operations per second, the median of a few runs, for the codec alone and for the whole
connection path (framing, header, frame copy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.connection import ClientConnection, Request, ServerConnection

RUNS = 7
RECORDS = bytes(16 * 1024)


@dataclass(frozen=True)
class FileSlice:
    path: str
    offset: int
    size: int


def produce_body() -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [{"name": "events", "partition_data": [{"index": 3, "records": RECORDS}]}],
    }


def fetch_body() -> dict:
    partition = {
        "partition_index": 3,
        "error_code": 0,
        "high_watermark": 1_000_000,
        "last_stable_offset": 1_000_000,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": FileSlice("00000000000000000000.log", 4096, 16 * 1024),
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "events", "partitions": [partition]}],
    }


def ops_per_second(operation: Callable[[], object], seconds: float = 0.3) -> float:
    """Median over RUNS of the rate measured in runs of about `seconds` each."""
    count = 1
    while True:  # size the batch so one run takes about `seconds`
        start = time.perf_counter()
        for _ in range(count):
            operation()
        elapsed = time.perf_counter() - start
        if elapsed > seconds / 10:
            break
        count *= 2
    count = max(1, int(count * seconds / elapsed))
    rates = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for _ in range(count):
            operation()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    frame = ClientConnection().send_request(ApiKey.PRODUCE, 8, produce_body())
    payload = memoryview(frame)
    produce = codec_for("ProduceRequest", 8)
    header_end = 4 + 2 + 2 + 4 + 2 + len("rlog")

    def decode_body() -> object:
        return produce.decode(payload, header_end)

    def decode_frame() -> object:
        server = ServerConnection()
        server.receive_data(frame)
        return server.next_event()

    fetch = codec_for("FetchResponse", 11)
    body = fetch_body()
    request = Request(ApiKey.FETCH, 11, 1, "bench", {}, 0)
    server = ServerConnection()

    def encode_body() -> object:
        out = bytearray()
        parts: list = []
        fetch.encode_into(out, parts, body)
        return parts

    def encode_frame() -> object:
        return server.send(request, body)

    print(f"Produce v8 request, 16 KiB records, {len(frame)} bytes framed")
    print(f"  decode body (codec)        {ops_per_second(decode_body):>12,.0f} ops/s")
    print(f"  decode frame (connection)  {ops_per_second(decode_frame):>12,.0f} ops/s")
    print("Fetch v11 response, one partition, records as a file slice")
    print(f"  encode body (codec)        {ops_per_second(encode_body):>12,.0f} ops/s")
    print(f"  encode frame (connection)  {ops_per_second(encode_frame):>12,.0f} ops/s")
    print(f"median of {RUNS} runs each")


if __name__ == "__main__":
    main()
