"""StagingBuffer: runs of records become chunks of the sink's size, every record once, in order."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from workers.staging import RawStagingFile, RecordChunk, StagedPartition, StagingBuffer

RECORD_BYTES = 100 + 64  # value + the per-record overhead the buffer counts


class CollectingSink:
    def __init__(self, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self.chunks: list[RecordChunk] = []

    def write(self, chunk: RecordChunk) -> None:
        self.chunks.append(chunk)

    def finish(self, staged: StagedPartition) -> StagedPartition:
        return staged

    def discard(self) -> None:
        self.chunks.clear()


def run(first: int, count: int, timestamps: list[int | None] | None = None) -> RecordChunk:
    offsets = list(range(first, first + count))
    return RecordChunk(
        "t",
        0,
        offsets,
        timestamps if timestamps is not None else [1000 + o for o in offsets],
        [None] * count,
        [b"x" * 100] * count,
        [None] * count,
        [None] * count,
    )


def test_runs_are_cut_where_the_sink_chunk_fills() -> None:
    sink = CollectingSink(chunk_bytes=10 * RECORD_BYTES + 1)
    buffer = StagingBuffer("t", 0, 0, sink=sink)
    for first, count in [(0, 3), (3, 40), (43, 1), (44, 25)]:
        buffer.extend(run(first, count))
    staged = buffer.finish()

    offsets = [o for chunk in sink.chunks for o in chunk.offsets]
    assert offsets == list(range(69))
    # Each full chunk holds the records up to and including the one that
    # filled it (11 here), whatever the runs were; the rest goes at finish.
    assert [len(c) for c in sink.chunks] == [11] * 6 + [3]
    assert (staged.start, staged.end, staged.records) == (0, 69, 69)
    assert staged.max_timestamp == 1068
    assert buffer.staged_bytes == 69 * RECORD_BYTES


def test_records_without_a_timestamp_do_not_count_for_the_watermark() -> None:
    sink = CollectingSink(chunk_bytes=1 << 20)
    buffer = StagingBuffer("t", 0, 0, sink=sink)
    buffer.extend(run(0, 3, timestamps=[None, None, None]))
    assert buffer.max_timestamp is None
    buffer.extend(run(3, 3, timestamps=[7, None, 5]))
    assert buffer.finish().max_timestamp == 7


def test_runs_of_uneven_records_keep_every_record_once_in_chunks_near_the_sink_size() -> None:
    sink = CollectingSink(chunk_bytes=20_000)
    buffer = StagingBuffer("t", 0, 0, sink=sink)
    offset = 0
    for count in (7, 300, 1, 55, 120):
        chunk = run(offset, count)
        chunk.values = [b"y" * (10 if o % 3 else 1000) for o in chunk.offsets]
        buffer.extend(chunk)
        offset += count
    staged = buffer.finish()
    assert [o for c in sink.chunks for o in c.offsets] == list(range(offset))
    assert staged.records == offset
    sizes = [sum(len(v or b"") + 64 for v in c.values) for c in sink.chunks]
    assert max(sizes) < 2 * sink.chunk_bytes
    assert len(sink.chunks) >= sum(sizes) // (2 * sink.chunk_bytes)


def test_raw_records_are_spilled_to_the_staging_file_in_pieces_of_at_most_two_mib(tmp_path: Path) -> None:
    # With buffer-bytes at 8 MiB, a commit's ~6 MB a partition was all still
    # buffered at its END, and its write waited for the spill.
    sink = RawStagingFile(tmp_path / "t+0+0.parquet", chunk_bytes=8 << 20)
    buffer = StagingBuffer("t", 0, 0, sink)
    records = (6 << 20) // RECORD_BYTES
    for first in range(0, records, 5000):
        buffer.extend(run(first, min(5000, records - first)))
    piece = (2 << 20) // RECORD_BYTES + 1
    # Written before the commit ends: all but what the last piece holds.
    assert sink.records >= records - piece
    staged = buffer.finish()
    assert staged.path is not None
    staged_file = pq.ParquetFile(staged.path)
    assert staged_file.read().column("offset").to_pylist() == list(range(records))
    assert all(staged_file.metadata.row_group(i).num_rows <= piece for i in range(staged_file.num_row_groups))
