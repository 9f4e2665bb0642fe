"""Micro-benchmark of the produce path's record walk (core/record_validation.py), in ns/record.

Batches of 10,000 records with 100-byte values, as a producer with linger.ms=5 builds them
(timestamp deltas 0..5 ms): null keys and 9-byte keys, without and with two headers,
uncompressed and compressed with each codec installed. For each it times
`validate_client_batch` (decompression included) and, on the same records, the plain-Python
tier alone (`_walk`), and `decode_batch` for scale. Best of --repeats runs.

    python benchmarks/bench_validation.py [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

from rlog.core import record_validation
from rlog.core.records import (
    BATCH_HEADER_SIZE,
    Compression,
    RecordInput,
    UnsupportedCompressionError,
    build_batch,
    decode_batch,
    decompress_records,
    read_header,
)

RULES = record_validation.ClientRules("bench-0", 1 << 30, keys_required=False)


def batches(count: int) -> list[tuple[str, bytes]]:
    value = bytes(range(100))
    headers = [("trace-id", b"0123456789abcdef"), ("source", b"bench")]
    shapes: dict[str, list[RecordInput]] = {
        "null keys": [(None, value) for _ in range(count)],
        "keyed": [(b"key-%05d" % (i % 100_000), value) for i in range(count)],
        "keyed, 2 headers": [(b"key-%05d" % (i % 100_000), value, headers) for i in range(count)],
        "null keys, sizes 50..150": [(None, bytes(50 + i % 101)) for i in range(count)],
    }
    timestamps = [1_700_000_000_000 + i * 6 // count for i in range(count)]
    found = []
    for codec in Compression:
        for shape, records in shapes.items():
            try:
                batch = build_batch(
                    records, base_timestamp=timestamps[0], timestamps=timestamps, compression=codec
                )
            except UnsupportedCompressionError:  # its library is not installed
                continue
            found.append((f"{codec.name.lower():6} {shape}", batch))
    return found


def best_ns(run: Callable[[], object], count: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        run()
        best = min(best, time.perf_counter_ns() - start)
    return best / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"{'batch':34} {'validate':>9} {'_walk':>7} {'decode':>7}  ns/record")
    for name, batch in batches(args.records):
        header = read_header(batch)
        payload = memoryview(batch)[BATCH_HEADER_SIZE:]
        records = bytes(decompress_records(header.compression, payload))
        max_timestamp = record_validation.validate_client_batch(batch, 0, header, RULES)
        assert max_timestamp == header.max_timestamp, name
        validate_one = partial(record_validation.validate_client_batch, batch, 0, header, RULES)
        validate = best_ns(validate_one, args.records, args.repeats)
        walk_one = partial(record_validation._walk, records, args.records, False)
        walk = best_ns(walk_one, args.records, args.repeats)
        decode = best_ns(partial(decode_batch, batch), args.records, max(1, args.repeats // 5))
        print(f"{name:34} {validate:9.0f} {walk:7.0f} {decode:7.0f}")


if __name__ == "__main__":
    main()
