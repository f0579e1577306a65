"""Parsing ``policy.csv``: ``p`` lines (rules) and ``g`` lines (role grants), with line numbers.

Every problem is collected with its file and line, so ``icegov policy check`` can show them all at
once; loading refuses a policy with any error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from proxy.governance import Action
from proxy.policy.effects import Restriction, is_restriction, parse_restriction, unquote_field
from proxy.policy.patterns import (
    WILDCARD,
    PatternError,
    ResourcePattern,
    compile_actions,
    compile_resource,
)

EFFECTS = ("allow", "deny")
Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong (error) or suspicious (warning) in a policy file."""

    source: str
    line: int | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.severity}: {self.message}"


class PolicyError(Exception):
    """A policy that cannot be loaded; ``problems`` says everything that is wrong with it."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        shown = "; ".join(str(p) for p in self.problems[:3])
        more = len(self.problems) - 3
        super().__init__(shown + (f" (and {more} more)" if more > 0 else ""))


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``p`` line: ``subject`` may (allow) or may not (deny) do ``actions`` on ``pattern``."""

    subject: str
    pattern: ResourcePattern
    action: str  # as written: an action, a group or "*"
    actions: frozenset[Action]
    allow: bool
    line: int
    written: str | None = None  # the pattern as the line wrote it, when ``pattern`` is derived

    @property
    def text(self) -> str:
        """The rule as a canonical policy line, e.g. ``p, writer, icegov.demo.*, INSERT, allow``
        (the pattern in its canonical text form: quotes only where a segment needs them)."""
        effect = "allow" if self.allow else "deny"
        shown = self.written or self.pattern.text
        return f"p, {self.subject}, {shown}, {self.action}, {effect}"

    def beneath(self) -> Rule | None:
        """For a deny on a closed pattern, the same deny on everything beneath what it names.

        A deny covers the resources below the one it names: denying the table ``ns.t`` also
        denies the namespace ``(ns, t)`` beneath it, which a path-based catalog stores in the
        table's own directory. (An open pattern already covers everything beneath it.)
        """
        if self.allow or self.pattern.open:
            return None
        return replace(self, pattern=ResourcePattern(self.pattern.segments, True),
                       written=self.pattern.text)


@dataclass(frozen=True, slots=True)
class Grant:
    """One ``g`` line: ``member`` (a principal or a role) holds ``role``."""

    member: str
    role: str
    line: int

    @property
    def text(self) -> str:
        """The grant as a canonical policy line."""
        return f"g, {self.member}, {self.role}"


@dataclass(frozen=True)
class ParsedPolicy:
    """The rules, grants and restrictions of a policy file, and the problems found reading it.

    ``rules`` are the allow/deny lines (what Casbin decides with); ``restrictions`` the mask and
    row-filter lines, which narrow an allowed SELECT and never allow or deny anything.
    """

    rules: tuple[Rule, ...]
    grants: tuple[Grant, ...]
    problems: tuple[Problem, ...]
    restrictions: tuple[Restriction, ...] = ()


def parse_policy(text: str, source: str) -> ParsedPolicy:
    """Parse policy text. Never raises: problems are returned with the rules that did parse."""
    rules: list[Rule] = []
    grants: list[Grant] = []
    restrictions: list[Restriction] = []
    problems: list[Problem] = []
    # lines end at "\n" only: str.splitlines() would also split at U+2028 and other characters
    # a quoted name may contain
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parsed = _parse_line(line, number)
        except ValueError as exc:
            problems.append(Problem(source, number, str(exc)))
            continue
        if isinstance(parsed, Rule):
            rules.append(parsed)
        elif isinstance(parsed, Restriction):
            restrictions.append(parsed)
        else:
            grants.append(parsed)
    problems.extend(_whole_file_problems(text, source, rules))
    return ParsedPolicy(tuple(rules), tuple(grants), tuple(problems), tuple(restrictions))


def _whole_file_problems(text: str, source: str, rules: list[Rule]) -> list[Problem]:
    problems = []
    if text and not text.endswith("\n"):
        problems.append(Problem(source, None, "does not end with a newline: a partially written "
                                "file? (write the whole file, ending in a newline)"))
    if not rules:
        problems.append(Problem(source, None, "has no 'p' rules: an empty or partially written "
                                "file? (to deny everything on purpose, write one deny rule)"))
    return problems


def _parse_line(line: str, number: int) -> Rule | Grant | Restriction:
    fields = split_fields(line)
    kind, values = fields[0], fields[1:]
    if kind == "p":
        return _parse_rule(values, number)
    if kind == "g":
        return _parse_grant(values, number)
    raise ValueError(f"unknown line type {kind!r}: lines start with 'p', 'g' or '#'")


def split_fields(line: str) -> list[str]:
    """The comma-separated fields of a line, stripped; a comma inside double quotes (a quoted
    resource segment such as ``"a,b"``) does not separate fields."""
    fields: list[str] = []
    start, quoted = 0, False
    for position, char in enumerate(line):
        if char == '"':
            quoted = not quoted  # a doubled quote inside quotes toggles twice: no change
        elif char == "," and not quoted:
            fields.append(line[start:position].strip())
            start = position + 1
    if quoted:
        raise ValueError("unbalanced double quote")
    fields.append(line[start:].strip())
    return fields


def _parse_rule(values: list[str], number: int) -> Rule | Restriction:
    if len(values) != 4:
        hint = ""
        if len(values) > 4 and is_restriction(values[3]):
            hint = (" (an effect containing commas must be double-quoted: "
                    "\"filter:region IN ('eu', 'us')\")")
        raise ValueError(f"a 'p' line has 4 fields after 'p' (subject, resource, action, "
                         f"effect), got {len(values)}{hint}")
    # the resource is never field-quoted: its own segment quoting keeps commas inside names
    subject, action, effect = (unquote_field(values[i]) for i in (0, 2, 3))
    resource = values[1]
    _check_name("subject", subject)
    if effect not in EFFECTS and not is_restriction(effect):
        raise ValueError(f"unknown effect {effect!r}: expected 'allow', 'deny', "
                         "'mask:<action>[:<value>]' or 'filter:<expression>'")
    try:
        pattern, actions = compile_resource(resource), compile_actions(action)
    except PatternError as exc:
        raise ValueError(str(exc)) from None
    if is_restriction(effect):
        return parse_restriction(subject, pattern, action, actions, effect, number)
    return Rule(subject, pattern, action, actions, effect == "allow", number)


def _parse_grant(values: list[str], number: int) -> Grant:
    if len(values) != 2:
        raise ValueError(f"a 'g' line has 2 fields after 'g' (member, role), got {len(values)}")
    member, role = (unquote_field(value) for value in values)
    _check_name("member", member)
    _check_name("role", role)
    return Grant(member, role, number)


def _check_name(what: str, name: str) -> None:
    if not name:
        raise ValueError(f"empty {what}")
    if name == WILDCARD:
        raise ValueError(f"'*' is not a {what}: wildcards are for resources and actions only "
                         "(grant to a role that every principal holds instead)")
    if any(ch.isspace() or not ch.isprintable() or ch == '"' for ch in name):
        raise ValueError(f"{what} {name!r} contains whitespace, quotes or control characters")
