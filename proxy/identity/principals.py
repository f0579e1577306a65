"""The principals file: who may use the client_credentials grant, with which roles.

Format (YAML)::

    principals:
      - name: writer                 # the client id; letters, digits and . _ @ -
        roles: [writer]              # what the policy grants rights to
        secret_hash: scrypt$16384$8$1$<salt>$<hash>   # from `icegov principal add`

This module parses the file; ``proxy.identity.store.PrincipalStore`` keeps the version in force
and re-reads it when it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from proxy.governance import Principal
from proxy.identity.hashing import SecretHash, SecretHashError, hash_secret

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"  # no ':' — clients send 'id:secret'
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


class PrincipalsFileError(ValueError):
    """The principals file is missing, not YAML, or not in the expected shape."""


class PrincipalEntry(BaseModel):
    """One principal: its name (the client id), its roles, and its hashed secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    roles: tuple[Name, ...] = ()
    secret_hash: str

    @field_validator("secret_hash")
    @classmethod
    def _parseable(cls, value: str) -> str:
        try:
            SecretHash.parse(value)
        except SecretHashError as exc:
            raise ValueError(str(exc)) from None
        return value

    def verify(self, secret: str) -> bool:
        """True if ``secret`` is this principal's client secret (slow, constant-time)."""
        return SecretHash.parse(self.secret_hash).matches(secret)

    def principal(self) -> Principal:
        """The governance principal this entry authenticates as."""
        return Principal(self.name, self.roles, source="token")


class PrincipalsDocument(BaseModel):
    """The whole file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    principals: tuple[PrincipalEntry, ...] = Field(default=())

    @field_validator("principals", mode="before")
    @classmethod
    def _empty_list(cls, value: Any) -> Any:
        return () if value is None else value  # 'principals:' with every entry removed

    @model_validator(mode="after")
    def _unique(self) -> PrincipalsDocument:
        seen: set[str] = set()
        for entry in self.principals:
            if entry.name in seen:
                raise ValueError(f"principal {entry.name!r} appears more than once")
            seen.add(entry.name)
        return self


def new_entry(name: str, roles: Iterable[str], secret: str) -> PrincipalEntry:
    """A principals-file entry for ``name`` whose secret is stored only as a fresh hash."""
    try:
        return PrincipalEntry(name=name, roles=tuple(roles), secret_hash=hash_secret(secret))
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None


def entry_yaml(entry: PrincipalEntry) -> str:
    """The entry as a YAML list item, indented to sit under the file's ``principals:`` key."""
    item = {"name": entry.name, "roles": list(entry.roles), "secret_hash": entry.secret_hash}
    text = yaml.safe_dump([item], sort_keys=False, default_flow_style=None, width=200)
    return "".join(f"  {line}" for line in text.splitlines(keepends=True))


def parse_principals(text: str, source: str = "<principals>") -> dict[str, PrincipalEntry]:
    """The principals in a file's text, by name; ``PrincipalsFileError`` says what is wrong."""
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PrincipalsFileError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise PrincipalsFileError(f"{source}: expected a mapping with a 'principals' list")
    try:
        document = PrincipalsDocument.model_validate(raw)
    except ValidationError as exc:
        raise PrincipalsFileError(f"{source}: {_describe(exc)}") from None
    return {entry.name: entry for entry in document.principals}


def load_principals(path: Path) -> dict[str, PrincipalEntry]:
    """Read and check the principals file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PrincipalsFileError(f"principals file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PrincipalsFileError(f"principals file {path} cannot be read: {exc}") from None
    return parse_principals(text, str(path))


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors as 'principals[2].roles[0]: message; ...'."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = "".join(f"[{loc}]" if isinstance(loc, int) else f".{loc}" for loc in error["loc"])
        message = error["msg"].removeprefix("Value error, ").replace("a valid tuple", "a list")
        parts.append(f"{where.lstrip('.') or 'file'}: {message}")
    return "; ".join(parts)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return str(exc)
