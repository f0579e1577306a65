"""What loadView refuses to a principal under column rules: a definition naming hidden names."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.handlers.views import names_any


def metadata(sql: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"schemas": [{"type": "struct", "schema-id": 0, "fields": list(fields)}],
            "versions": [{"version-id": 1, "representations": [
                {"type": "sql", "sql": sql, "dialect": "spark"}]}]}


def field(name: str, kind: Any = "string") -> dict[str, Any]:
    return {"id": 1, "name": name, "type": kind, "required": False}


@pytest.mark.parametrize("view", [
    metadata("SELECT * FROM t", field("id"), field("SSN")),  # a schema field
    metadata("SELECT id, ssn AS x FROM t", field("id"), field("x")),  # the SQL, aliased
    metadata("SELECT id FROM t WHERE `Ssn` > 0", field("id")),  # quoted, any case
    metadata("SELECT s FROM t", field("s", {"type": "struct", "fields": [field("ssn")]})),
    metadata("SELECT m FROM t", field("m", {"type": "map", "key-id": 2, "key": "string",
                                            "value-id": 3, "value": {
                                                "type": "struct", "fields": [field("ssn")]}})),
])
def test_a_definition_naming_a_hidden_name_is_caught(view: dict[str, Any]) -> None:
    assert names_any(view, frozenset({"ssn"}))


def test_every_version_counts_not_only_the_current_one() -> None:
    view = metadata("SELECT id FROM t", field("id"))
    view["versions"].append({"version-id": 0, "representations": [
        {"type": "sql", "sql": "SELECT ssn FROM t", "dialect": "trino"}]})
    assert names_any(view, frozenset({"ssn"}))


def test_a_definition_naming_nothing_hidden_passes() -> None:
    view = metadata("SELECT id, ssn_count FROM t -- ssnx", field("id"), field("ssn_count"))
    assert not names_any(view, frozenset({"ssn"}))  # whole words only
    assert names_any(metadata("SELECT `my col` FROM t", field("x")), frozenset({"my col"}))
