"""An audit record as an OCSF event (schema 1.8.0, profile ``security_control``).

``to_ocsf`` turns one sealed record (the JSON object of one line, chain fields included) into
one OCSF event: class 6005 Datastore Activity for table reads and data changes (loading a table,
its credentials, planning its scans, committing to it) that name their table, class 6003 API
Activity for every other request (a request refused before its table could be named, e.g. an
invalid name, is one: 6005 requires the datastore object it acts on). The mapping, field by
field, is in proxy/audit/README.md ("OCSF events"). Whatever OCSF
has no field for (the chain's ``seq``/``prev``/``hash``, the commit evidence, the record's own
decision word) is kept whole under ``unmapped.icegov``, so no fact of the record is lost.

The conversion never fails on a record icegov wrote; a line that is not such a record (not a
JSON object, or without the fields every record has) raises ``NotARecord``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import proxy
from proxy.resources import SegmentError, parse_segments

OCSF_VERSION = "1.8.0"
PROFILES = ("security_control",)
APPLICATION_ACTIVITY = 6
API_ACTIVITY = 6003
DATASTORE_ACTIVITY = 6005

TABLE_READS = {"load_table": 1, "load_credentials": 1, "plan_table_scan": 4,
               "fetch_planning_result": 4, "fetch_scan_tasks": 4, "cancel_planning": 4}
"""Datastore activities (1 Read, 4 Query) of the endpoints that read a table."""
DATA_CHANGES = frozenset({"commit_table", "commit_transaction"})
CHANGE_ACTIVITY = {"INSERT": 5, "APPEND": 5, "DELETE": 7, "UPDATE": 2}
"""Datastore activity of a commit by its classification (5 Write, 7 Delete; any other: 2 Update)."""

DATASTORE_NAMES = {1: "Read", 2: "Update", 4: "Query", 5: "Write", 7: "Delete"}
API_NAMES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete"}

ALLOWED = frozenset({"allow", "public"})
DENIED = frozenset({"deny", "hidden", "unauthenticated", "refused"})
DISPOSITIONS = {"allow": (1, "Allowed"), "public": (1, "Allowed"), "deny": (2, "Blocked"),
                "hidden": (2, "Blocked"), "refused": (2, "Blocked"),
                "unauthenticated": (26, "Unauthorized"), "error": (27, "Error")}
HTTP_METHODS = frozenset({"OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT",
                          "PATCH"})
REQUIRED = ("time", "request_id", "method", "path", "endpoint", "decision")


class NotARecord(ValueError):
    """A line that is not an icegov audit record."""


def to_ocsf(record: dict[str, Any], policy_version: str | None = None) -> dict[str, Any]:
    """The OCSF event of one audit record. ``policy_version`` (the digest of the policy files
    in force) becomes ``policy.version`` unless the record names its own ``policy_digest``."""
    _check(record)
    endpoint = str(record["endpoint"])
    datastore = (endpoint in TABLE_READS or endpoint in DATA_CHANGES) and bool(_resources(record))
    event = _base(record, DATASTORE_ACTIVITY if datastore else API_ACTIVITY)
    activity = _datastore_activity(record) if datastore else _api_activity(record)
    names = DATASTORE_NAMES if datastore else API_NAMES
    event.update(activity_id=activity, activity_name=names.get(activity, "Other"),
                 type_uid=event["class_uid"] * 100 + activity,
                 type_name=f"{event['class_name']}: {names.get(activity, 'Other')}")
    event.update(_security_control(record, policy_version))
    event.update(_datastore(record) if datastore else _api(record))
    return event


def _check(record: object) -> None:
    if not isinstance(record, dict):
        raise NotARecord("not a JSON object")
    missing = [name for name in REQUIRED if not isinstance(record.get(name), str)]
    if missing:
        raise NotARecord(f"no {', '.join(missing)}")
    status, latency = record.get("status"), record.get("latency_ms")
    if status is not None and type(status) is not int:
        raise NotARecord(f"status {status!r:.40} is not a number")
    if latency is not None and not (type(latency) in (int, float) and math.isfinite(latency)):
        raise NotARecord(f"latency_ms {latency!r:.40} is not a finite number")
    roles = record.get("roles")
    if roles is not None and not (isinstance(roles, list)
                                  and all(isinstance(role, str) for role in roles)):
        raise NotARecord(f"roles {roles!r:.40} is not a list of role names")


def _base(record: dict[str, Any], class_uid: int) -> dict[str, Any]:
    status = record.get("status")
    event: dict[str, Any] = {
        "category_uid": APPLICATION_ACTIVITY, "category_name": "Application Activity",
        "class_uid": class_uid,
        "class_name": "Datastore Activity" if class_uid == DATASTORE_ACTIVITY else "API Activity",
        "time": epoch_ms(record["time"]),
        "severity_id": _severity(record["decision"]),
        "status_id": 0 if status is None else 1 if 200 <= status < 400 else 2,
        "metadata": _metadata(record),
        "actor": _actor(record),
        "src_endpoint": {"name": _client(record) or "unknown"},
        "message": _message(record),
        "unmapped": {"icegov": _unmapped(record)},
    }
    if record["method"] in HTTP_METHODS:  # not icegov's own (INTERNAL: a policy load)
        event["http_request"] = _http_request(record)
    event["severity"] = {1: "Informational", 2: "Low", 3: "Medium"}[event["severity_id"]]
    event["status"] = {0: "Unknown", 1: "Success", 2: "Failure"}[event["status_id"]]
    if isinstance(status, int):
        event["status_code"] = str(status)
        event["http_response"] = {"code": status}
    if isinstance(record.get("error"), str):
        event["status_detail"] = record["error"]
    if isinstance(record.get("latency_ms"), int | float):
        event["duration"] = int(record["latency_ms"])
    return event


def epoch_ms(text: str) -> int:
    """An ISO 8601 time with its offset (as records carry it) in milliseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise NotARecord(f"time {text[:40]!r} is not ISO 8601") from exc
    if moment.tzinfo is None:
        raise NotARecord(f"time {text[:40]!r} has no offset")
    return int(moment.timestamp() * 1000 + (0.5 if moment.timestamp() >= 0 else -0.5))


def _severity(decision: str) -> int:
    """Informational for what was allowed, Medium for a denial, Low for an error."""
    return 1 if decision in ALLOWED else 3 if decision in DENIED else 2


def _metadata(record: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "version": OCSF_VERSION, "profiles": list(PROFILES),
        "product": {"name": "icegov", "vendor_name": "icegov", "version": proxy.__version__},
        "log_name": "audit", "event_code": record["endpoint"],
        "correlation_uid": record["request_id"],
    }
    if isinstance(record.get("schema"), str):
        metadata["log_version"] = record["schema"]
    if isinstance(record.get("hash"), str):
        metadata["uid"] = record["hash"]
    if isinstance(record.get("seq"), int):
        metadata["sequence"] = record["seq"]
    if isinstance(record.get("writer"), str):
        metadata["log_provider"] = record["writer"]
    return metadata


def _client(record: dict[str, Any]) -> str | None:
    client = record.get("client")
    agent = client.get("user_agent") if isinstance(client, dict) else None
    return agent if isinstance(agent, str) and agent else None


def _actor(record: dict[str, Any]) -> dict[str, Any]:
    """The principal as the actor's user (its roles as groups); an unauthenticated caller is
    known only by its client."""
    actor: dict[str, Any] = {"app_name": _client(record) or "unknown"}
    principal = record.get("principal")
    if isinstance(principal, str) and principal:
        roles = record.get("roles") or []
        actor["user"] = {"name": principal, "uid": principal,
                         "groups": [{"name": role} for role in roles]}
    return actor


def _http_request(record: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = {"http_method": record["method"], "uid": record["request_id"],
                               "url": {"path": record["path"]}}
    agent = _client(record)
    if agent:
        request["user_agent"] = agent
    return request


def _message(record: dict[str, Any]) -> str:
    classes = _classifications(record)
    resources = " ".join(str(r) for r in record.get("resources") or [])
    said = f"{record['decision']} {record['endpoint']}"
    said += f" {resources}" if resources else ""
    return said + (f" ({', '.join(classes)})" if classes else "")


def _classifications(record: dict[str, Any]) -> list[str]:
    """The commit classifications of the record's evidence, in order, once each."""
    found: list[str] = []
    for entry in record.get("evidence") or []:
        value = entry.get("classification") if isinstance(entry, dict) else None
        if isinstance(value, str) and value not in found:
            found.append(value)
    return found


CHAIN_AND_FACTS = ("schema", "seq", "prev", "hash", "mac", "writer", "decision", "endpoint",
                   "resources", "actions", "roles", "auth", "evidence", "replayed",
                   "new_snapshot_ids", "latency_ms", "rules", "policy_digest")


def _unmapped(record: dict[str, Any]) -> dict[str, Any]:
    """The chain fields and every fact OCSF has no field for, as the record has them."""
    kept = {name: record[name] for name in CHAIN_AND_FACTS if name in record}
    classes = _classifications(record)
    if classes:
        kept["classification"] = "+".join(classes)
    return kept


def _security_control(record: dict[str, Any],
                      policy_version: str | None) -> dict[str, Any]:
    """``action``/``disposition`` from the decision and the deciding rule as the policy."""
    decision = record["decision"]
    action_id = 1 if decision in ALLOWED else 2 if decision in DENIED else 0
    disposition_id, disposition = DISPOSITIONS.get(decision, (99, "Other"))
    fields: dict[str, Any] = {
        "action_id": action_id, "action": {0: "Unknown", 1: "Allowed", 2: "Denied"}[action_id],
        "disposition_id": disposition_id, "disposition": disposition,
    }
    policy = _policy(record, policy_version)
    if policy is not None:
        fields["policy"] = policy
    return fields


def _policy(record: dict[str, Any], policy_version: str | None) -> dict[str, Any] | None:
    """The rule that decided: the first refusing rule of a denial, else the first rule. The
    default deny (no rule matched) is named ``default deny``."""
    rules = [r for r in record.get("rules") or [] if isinstance(r, dict)]
    if not rules:
        return None
    deciding = next((r for r in rules if r.get("allowed") is False), rules[0])
    line = deciding.get("rule")
    policy: dict[str, Any] = {
        "name": line if isinstance(line, str) else "default deny",
        "uid": line if isinstance(line, str) else "default-deny",
        "type": "casbin", "is_applied": True,
        "desc": f"{deciding.get('action')} on {deciding.get('resource')}",
    }
    version = record.get("policy_digest") or policy_version
    if isinstance(version, str):
        policy["version"] = version
    return policy


def _datastore_activity(record: dict[str, Any]) -> int:
    endpoint = record["endpoint"]
    if endpoint in TABLE_READS:
        return TABLE_READS[endpoint]
    classes = _classifications(record)
    if len(classes) == 1:
        return CHANGE_ACTIVITY.get(classes[0], 2)
    return 2


def _api_activity(record: dict[str, Any]) -> int:
    method, endpoint = record["method"], record["endpoint"]
    if method in ("GET", "HEAD"):
        return 2
    if method == "DELETE":
        return 4
    return 1 if endpoint.startswith(("create_", "register_")) else 3


def _datastore(record: dict[str, Any]) -> dict[str, Any]:
    """The table (the first the request names; all are in ``unmapped``) and its namespace."""
    fields: dict[str, Any] = {"type_id": 3, "type": "Table"}
    resources = _resources(record)
    try:
        segments = [name for name, _ in parse_segments(resources[0])]
    except SegmentError:
        segments = [resources[0]]
    fields["table"] = {"name": segments[-1], "uid": resources[0]}
    if len(segments) > 1:
        fields["database"] = {"name": ".".join(segments[:-1]), "type_id": 99,
                              "type": "Apache Iceberg namespace"}
    return fields


def _api(record: dict[str, Any]) -> dict[str, Any]:
    api: dict[str, Any] = {"operation": record["endpoint"],
                           "service": {"name": "icegov", "version": proxy.__version__},
                           "request": {"uid": record["request_id"]}}
    fields: dict[str, Any] = {"api": api}
    resources = _resources(record)
    if resources:
        fields["resources"] = [{"uid": r, "name": r} for r in resources]
    return fields


def _resources(record: dict[str, Any]) -> list[str]:
    return [r for r in record.get("resources") or [] if isinstance(r, str)]
