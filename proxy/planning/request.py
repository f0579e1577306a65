"""Planning requests: the REST spec's ``PlanTableScanRequest`` and ``FetchScanTasksRequest``.

``parse_scan_request`` validates strictly and answers 400 naming the field: integers that are not
booleans and fit a long, lists of non-empty strings, no unknown fields, and the combinations the
spec and Java's own validation forbid:

* ``snapshot-id`` with ``start-snapshot-id`` or ``end-snapshot-id`` (a point-in-time scan or an
  incremental one, not both);
* ``start-snapshot-id`` without ``end-snapshot-id`` (the spec requires the end), and
  ``end-snapshot-id`` alone (an incremental scan names where it starts);
* a negative ``min-rows-requested``.

``use-snapshot-schema`` without ``snapshot-id`` is accepted: it has nothing to choose between and
the current schema is used (a client scanning a branch sends ``false`` anyway).

``ScanRequest.to_json`` writes the request back in a canonical form that parses to an equal
request (what plan-task tokens carry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression

from proxy.errors import BadRequest
from proxy.planning.expressions import parse_filter_detailed
from proxy.planning.filter_json import filter_to_json
from proxy.planning.implication import normalized_key

MAX_NAMES = 10_000  # names in select or stats-fields
MAX_NAME_LENGTH = 1024
_LONG = (-(2**63), 2**63 - 1)
_FIELDS = frozenset({"snapshot-id", "select", "filter", "case-sensitive", "use-snapshot-schema",
                     "start-snapshot-id", "end-snapshot-id", "stats-fields",
                     "min-rows-requested"})


@dataclass(frozen=True)
class ScanRequest:
    """One validated ``PlanTableScanRequest``.

    ``filter`` is unbound and ``AlwaysTrue`` when absent; ``filter_key`` is its canonical key;
    ``filter_columns`` every column name the filter mentions as written (including those of
    predicates that could not be translated and were weakened, see
    ``proxy.planning.expressions``); ``filter_exact`` whether ``filter`` is exactly the client's.
    """

    select: tuple[str, ...] | None = None
    filter: BooleanExpression = field(default_factory=AlwaysTrue)
    filter_key: str = "true"
    case_sensitive: bool = True
    snapshot_id: int | None = None
    use_snapshot_schema: bool = False
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    stats_fields: tuple[str, ...] | None = None
    min_rows_requested: int | None = None
    filter_columns: frozenset[str] = frozenset()
    filter_exact: bool = True

    @property
    def incremental(self) -> bool:
        """True for an incremental scan (``start-snapshot-id`` exclusive to ``end-snapshot-id``)."""
        return self.start_snapshot_id is not None

    def to_json(self) -> dict[str, Any]:
        """The request as a canonical ``PlanTableScanRequest`` body (defaults left out)."""
        body: dict[str, Any] = {}
        if self.snapshot_id is not None:
            body["snapshot-id"] = self.snapshot_id
        if self.select is not None:
            body["select"] = list(self.select)
        if not isinstance(self.filter, AlwaysTrue):
            body["filter"] = filter_to_json(self.filter)
        if not self.case_sensitive:
            body["case-sensitive"] = False
        if self.use_snapshot_schema:
            body["use-snapshot-schema"] = True
        if self.start_snapshot_id is not None:
            body["start-snapshot-id"] = self.start_snapshot_id
        if self.end_snapshot_id is not None:
            body["end-snapshot-id"] = self.end_snapshot_id
        if self.stats_fields is not None:
            body["stats-fields"] = list(self.stats_fields)
        if self.min_rows_requested is not None:
            body["min-rows-requested"] = self.min_rows_requested
        return body


def parse_scan_request(body: Any) -> ScanRequest:
    """A validated ``ScanRequest`` from a parsed JSON body; ``BadRequest`` naming the field."""
    if not isinstance(body, Mapping):
        raise BadRequest("a plan request must be a JSON object")
    unknown = sorted(str(k) for k in body if k not in _FIELDS)
    if unknown:
        raise BadRequest(f"a plan request does not take {', '.join(unknown)[:120]}")
    parsed = parse_filter_detailed(body["filter"]) if body.get("filter") is not None else None
    request = ScanRequest(
        select=_names(body, "select"),
        filter=parsed.expression if parsed else AlwaysTrue(),
        filter_key=normalized_key(parsed.expression) if parsed else "true",
        case_sensitive=_flag(body, "case-sensitive", default=True),
        snapshot_id=_long(body, "snapshot-id"),
        use_snapshot_schema=_flag(body, "use-snapshot-schema", default=False),
        start_snapshot_id=_long(body, "start-snapshot-id"),
        end_snapshot_id=_long(body, "end-snapshot-id"),
        stats_fields=_names(body, "stats-fields"),
        min_rows_requested=_long(body, "min-rows-requested"),
        filter_columns=parsed.columns if parsed else frozenset(),
        filter_exact=parsed.exact if parsed else True,
    )
    _check_combinations(request)
    return request


def _check_combinations(request: ScanRequest) -> None:
    if request.snapshot_id is not None and (request.start_snapshot_id is not None
                                            or request.end_snapshot_id is not None):
        raise BadRequest("snapshot-id cannot be combined with start-snapshot-id or "
                         "end-snapshot-id: a scan is either point-in-time or incremental")
    if request.start_snapshot_id is not None and request.end_snapshot_id is None:
        raise BadRequest("end-snapshot-id is required when start-snapshot-id is given")
    if request.end_snapshot_id is not None and request.start_snapshot_id is None:
        raise BadRequest("end-snapshot-id needs start-snapshot-id: an incremental scan names "
                         "the snapshot it starts after")
    if request.min_rows_requested is not None and request.min_rows_requested < 0:
        raise BadRequest("min-rows-requested must not be negative")


def parse_task_request(body: Any) -> str:
    """The plan task of a ``FetchScanTasksRequest`` (``{"plan-task": "..."}``)."""
    if not isinstance(body, Mapping) or set(body) != {"plan-task"}:
        raise BadRequest("a tasks request must be {\"plan-task\": \"...\"}")
    task = body["plan-task"]
    if not isinstance(task, str) or not task:
        raise BadRequest("plan-task must be a non-empty string")
    return task


def _long(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (
            _LONG[0] <= value <= _LONG[1]):
        raise BadRequest(f"{key} must be an integer (a long)")
    return value


def _flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false")
    return value


def _names(body: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise BadRequest(f"{key} must be a list of at most {MAX_NAMES} field names")
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME_LENGTH for v in value):
        raise BadRequest(f"{key} must list field names (strings of 1 to {MAX_NAME_LENGTH} "
                         "characters)")
    return tuple(value)
