"""pyiceberg's Avro file reader with its per-file set-up remembered: ``open_avro``.

Opening an Avro file with pyiceberg converts the schema in the file's header to an Iceberg schema
and resolves a reader tree against the schema icegov reads with (~0.3 ms per file, paid for every
manifest list and manifest a commit reads). Manifests written by one writer for one partition
spec carry the same header schema, so the set-up is remembered by the exact schema text and the
read it serves (``kind``: which read schema, record types and enums). Only the set-up is kept —
a schema and a reader tree, both pure functions of that text and immutable once built — never
anything read from a file, so nothing one table's file says can reach another table's reading.
Texts over 64 KiB are set up afresh every time; at most 128 set-ups are kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import AvroFile
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import resolve_reader
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.typedef import StructProtocol
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from proxy.commits.lru import SizedLru

_SCHEMA_KEY = "avro.schema"
_REMEMBERED_TEXT = 64 * 1024
_SET_UPS: SizedLru[tuple[str, str], tuple[Schema, Reader]] = SizedLru(128)


class _RememberingAvroFile(AvroFile[Any]):
    """``AvroFile`` whose ``__enter__`` takes the schema and reader tree from ``_SET_UPS``."""

    __slots__ = ("kind",)
    kind: str

    def __enter__(self) -> _RememberingAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        text = self.header.meta.get(_SCHEMA_KEY)
        if text is None:
            raise ValueError("No schema found in Avro file headers")
        key = (self.kind, text)
        set_up = _SET_UPS.get(key) if len(text) <= _REMEMBERED_TEXT else None
        if set_up is None:
            schema = AvroSchemaConversion().avro_to_iceberg(json.loads(text))
            reader = resolve_reader(schema, self.read_schema or schema, self.read_types,
                                    self.read_enums)
            set_up = (schema, reader)
            if len(text) <= _REMEMBERED_TEXT:
                _SET_UPS.put(key, set_up)
        self.schema, self.reader = set_up
        if not self.read_schema:
            self.read_schema = self.schema
        return self


def open_avro(io: FileIO, path: str, kind: str, schema: Schema,
              read_types: dict[int, Callable[..., StructProtocol]],
              read_enums: dict[int, Callable[..., Enum]]) -> AvroFile[Any]:
    """An Avro file to read with ``schema``, ``read_types`` and ``read_enums``, which together
    must always be the same for one ``kind`` (the set-up is remembered under it)."""
    avro = _RememberingAvroFile(io.new_input(path), schema, read_types=read_types,
                                read_enums=read_enums)
    avro.kind = kind
    return avro
