"""The embedded catalog's request bodies, as pydantic wire models of the Iceberg REST spec.

Every field is type-checked strictly (a string is a string: ``"overwrite": "yes"`` is not a
boolean, ``7`` is not a name, ``null`` is not a property value), names are validated with
``proxy.resources`` rules, and nested Iceberg structures (schemas, specs, sort orders, table
requirements and updates) are pyiceberg's own models. Unknown fields are ignored, as the spec's
extension rules allow. pyiceberg's ``CreateTableRequest`` and ``RegisterTableRequest`` are not
reused: they require fields the spec makes optional and coerce strings to booleans.

Namespace levels may not contain ``.`` here: SqlCatalog stores a namespace as its levels joined
with ``.``, so ``["a.b"]`` and ``["a", "b"]`` would be one namespace under two names. Lengths
follow SqlCatalog's columns (a namespace and a table name at most 255 characters, namespace
property keys 255 and values 1000), so that no database refuses what was accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import AddSchemaUpdate, TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier
from pyiceberg.types import IcebergType, ListType, MapType, StructType

from proxy.errors import BadRequest
from proxy.inbound import InboundRequest
from proxy.resources import validate_name, validate_namespace
from proxy.routes import NAMESPACE_SEPARATOR


def namespace_levels(levels: object, what: str = "namespace") -> tuple[str, ...]:
    """A valid namespace here (``proxy.resources`` rules, no ``.``, short enough); else 400."""
    namespace = validate_namespace(levels, what)
    if any("." in level for level in namespace):
        raise BadRequest(f"invalid {what}: the embedded catalog does not allow '.' in a namespace "
                         "level")
    if len(".".join(namespace)) > MAX_STORED_NAME:
        raise BadRequest(f"invalid {what}: longer than {MAX_STORED_NAME} characters")
    return namespace


def table_name(value: object, what: str = "table name") -> str:
    """A valid table name for the embedded catalog; else 400."""
    name = validate_name(value, what)
    if len(name) > MAX_STORED_NAME:
        raise BadRequest(f"invalid {what}: longer than {MAX_STORED_NAME} characters")
    return name


MAX_STORED_NAME = 255
Name = Annotated[StrictStr, AfterValidator(table_name)]
Namespace = Annotated[tuple[StrictStr, ...], AfterValidator(namespace_levels)]
Properties = dict[StrictStr, StrictStr]
NamespaceProperties = dict[Annotated[StrictStr, Field(max_length=MAX_STORED_NAME)],
                           Annotated[StrictStr, Field(max_length=1000)]]


class WireModel(BaseModel):
    """Base of the request bodies: frozen, aliases as on the wire, unknown fields ignored."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class CreateNamespaceRequest(WireModel):
    namespace: Namespace
    properties: NamespaceProperties = Field(default_factory=dict)


class UpdateNamespacePropertiesRequest(WireModel):
    removals: list[StrictStr] = Field(default_factory=list)
    updates: NamespaceProperties = Field(default_factory=dict)


class CreateTableRequest(WireModel):
    name: Name
    location: StrictStr | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(default=None, alias="partition-spec")
    write_order: SortOrder | None = Field(default=None, alias="write-order")
    stage_create: StrictBool = Field(default=False, alias="stage-create")
    properties: Properties = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_field_ids(self) -> CreateTableRequest:
        check_field_ids(self.table_schema)
        return self


class RegisterTableRequest(WireModel):
    name: Name
    metadata_location: StrictStr = Field(alias="metadata-location", min_length=1)
    overwrite: StrictBool = False


class TableIdentifier(WireModel):
    namespace: Namespace
    name: Name

    @property
    def identifier(self) -> Identifier:
        return (*self.namespace, self.name)


class RenameTableRequest(WireModel):
    source: TableIdentifier
    destination: TableIdentifier


class CommitTableRequest(WireModel):
    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...] = ()
    updates: tuple[TableUpdate, ...] = ()

    @model_validator(mode="after")
    def _unique_field_ids(self) -> CommitTableRequest:
        for update in self.updates:
            if isinstance(update, AddSchemaUpdate):
                check_field_ids(update.schema_)
        return self


def check_field_ids(schema: Schema) -> None:
    """A schema whose field ids repeat (Java readers cannot load such a table) is refused."""
    seen: set[int] = set()
    for field_id in _field_ids(schema.as_struct()):
        if field_id in seen:
            raise ValueError(f"schema field id {field_id} is used more than once")
        seen.add(field_id)


def _field_ids(kind: IcebergType) -> Iterator[int]:
    if isinstance(kind, StructType):
        for field in kind.fields:
            yield field.field_id
            yield from _field_ids(field.field_type)
    elif isinstance(kind, ListType):
        yield kind.element_id
        yield from _field_ids(kind.element_type)
    elif isinstance(kind, MapType):
        yield kind.key_id
        yield from _field_ids(kind.key_type)
        yield kind.value_id
        yield from _field_ids(kind.value_type)


class TableChange(CommitTableRequest):
    """One entry of a transaction: like a table commit, but the identifier is required."""

    identifier: TableIdentifier


class CommitTransactionRequest(WireModel):
    table_changes: list[TableChange] = Field(alias="table-changes", min_length=1)


class ReportMetricsRequest(WireModel):
    """A scan or commit report; the embedded catalog checks its shape and discards it."""

    report_type: Literal["scan-report", "commit-report"] = Field(alias="report-type")
    table_name: StrictStr = Field(alias="table-name")
    snapshot_id: int = Field(alias="snapshot-id", strict=True)
    metrics: dict[StrictStr, Any]


M = TypeVar("M", bound=WireModel)


def parse_body(model: type[M], inbound: InboundRequest) -> M:
    """The request body as ``model``; 400 naming the first offending field otherwise."""
    body = inbound.json()
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    try:
        return model.model_validate(body)
    except PydanticValidationError as exc:
        raise BadRequest(f"invalid {_title(model)}: {_first_error(exc)}") from exc
    except BadRequest:
        raise
    except Exception as exc:  # a nested pyiceberg validator failing on hostile input
        raise BadRequest(f"invalid {_title(model)}") from exc


def path_namespace(inbound: InboundRequest) -> tuple[str, ...]:
    """The namespace named in the URL, validated."""
    return namespace_levels(list(inbound.route.namespace))


def path_table(inbound: InboundRequest) -> Identifier:
    """(namespace levels..., table) named in the URL, validated."""
    return (*path_namespace(inbound), table_name(inbound.route.params.get("table")))


def parent_namespace(inbound: InboundRequest) -> tuple[str, ...]:
    """The ``parent`` query parameter of a namespace listing (empty: top level), validated."""
    parent = inbound.query("parent")
    return namespace_levels(parent.split(NAMESPACE_SEPARATOR), "parent") if parent else ()


def _title(model: type[WireModel]) -> str:
    return model.__name__.removesuffix("Request")


def _first_error(exc: PydanticValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    location = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{location}: {first['msg']}"[:300]
