"""``proxy.governed.proof``: a file is referenced in place only when its own values prove every
row permitted — never on the word of its manifest entry's partition values or of its footer's
statistics alone, which the writer chose."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from proxy.governed.proof import FileProver, Verdict

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))
EU = EqualTo("region", "eu")


def make_table(tmp: Path, spec: PartitionSpec) -> Table:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp}/c.db", warehouse=(tmp / "wh").as_uri())
    catalog.create_namespace("demo")
    return catalog.create_table(("demo", "orders"), schema=SCHEMA, partition_spec=spec)


def write_file(table: Table, name: str, regions: list[str]) -> str:
    """A Parquet file (field ids, no dictionary, no Arrow schema) of rows in ``regions``."""
    path = f"{table.location()}/data/{name}.parquet"
    rows = pa.table({"id": pa.array(range(len(regions)), pa.int64()),
                     "region": pa.array(regions)}).cast(schema_to_pyarrow(SCHEMA))
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out, use_dictionary=False, store_schema=False)
    return path


def entry(table: Table, path: str, rows: int, partition: Record, spec_id: int) -> DataFile:
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=partition, record_count=rows, file_size_in_bytes=len(table.io.new_input(path)))
    data_file.spec_id = spec_id
    return data_file


def lie_in_footer(path: Path, truth: bytes, claim: bytes) -> None:
    """Rewrite the footer's statistics of ``path`` to say ``claim`` where they say ``truth``
    (same length), leaving the data pages as they are."""
    content = path.read_bytes()
    footer_length = int.from_bytes(content[-8:-4], "little")
    start = len(content) - 8 - footer_length
    footer = content[start:-8]
    assert truth in footer
    path.write_bytes(content[:start] + footer.replace(truth, claim) + content[-8:])


def test_a_partition_value_that_lies_does_not_prove_a_file(tmp_path: Path) -> None:
    """An entry says region=eu of a file that holds a US row: the file is copied, not
    referenced (the copy then refuses the entry that does not describe its rows)."""
    table = make_table(tmp_path, PartitionSpec(PartitionField(2, 1000, IdentityTransform(),
                                                              "region")))
    path = write_file(table, "lie", ["us"])
    prover = FileProver(table.metadata, EU, table.io)
    assert prover.verdict(entry(table, path, 1, Record("eu"), 0)) is Verdict.SOME
    honest = write_file(table, "honest", ["eu", "eu"])
    assert prover.verdict(entry(table, honest, 2, Record("eu"), 0)) is Verdict.ALL
    assert prover.verdict(entry(table, path, 1, Record("us"), 0)) is Verdict.NONE


def test_footer_statistics_that_lie_do_not_prove_a_file(tmp_path: Path) -> None:
    table = make_table(tmp_path, PartitionSpec())
    path = write_file(table, "lie", ["us"])
    local = Path(path.removeprefix("file://"))
    lie_in_footer(local, b"us", b"eu")
    stats = pq.ParquetFile(local).metadata.row_group(0).column(1).statistics
    assert (stats.min, stats.max) == ("eu", "eu")  # the footer now claims only EU rows
    prover = FileProver(table.metadata, EU, table.io)
    assert prover.verdict(entry(table, path, 1, Record(), 0)) is Verdict.SOME
