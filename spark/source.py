"""The `rlog` data source: Spark's Kafka source and sink options over an rlog cluster."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .options import parse_read_options, parse_write_options


class RlogDataSource(DataSource):
    """`spark.read.format("rlog")`, a drop-in for `format("kafka")`."""

    @classmethod
    def name(cls) -> str:
        return "rlog"

    def _include_headers(self) -> bool:
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        return lowered.get("includeheaders", "false").strip().lower() == "true"

    def schema(self) -> StructType:
        from .records import kafka_schema

        return kafka_schema(self._include_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch_reader import RlogBatchReader

        return RlogBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_reader import RlogStreamReader

        return RlogStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import batch_writer

        return batch_writer(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import stream_writer

        return stream_writer(parse_write_options(self.options), schema)
