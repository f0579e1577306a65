"""Restriction rules: ``p`` lines whose effect is a column mask or a row filter.

A ``p`` line's effect is ``allow``, ``deny``, or one of::

    mask:<action>[:<value>]     a MaskAction; only mask-to-fixed-value takes (and needs) a value
    filter:<expression>         an Iceberg expression (pyiceberg's SQL-like syntax)

A restriction neither grants nor denies: it narrows what an otherwise allowed SELECT returns. Its
action must include SELECT (``SELECT``, ``READ`` or ``*``); a mask names columns
(``catalog.namespace….table.column``), a filter names tables. Casbin treats an effect other than
``allow``/``deny`` as indeterminate, so restriction lines change no allow/deny decision there
either (``proxy.policy.model`` gives them to the reference enforcer as written).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse as parse_expression

from proxy.governance import Action
from proxy.policy.patterns import ResourcePattern
from proxy.restrictions import Mask, MaskAction

MASK_PREFIX = "mask:"
FILTER_PREFIX = "filter:"
COLUMN_SEGMENTS = 4  # catalog, namespace, table, column: the fewest a column has
TABLE_SEGMENTS = 3


@dataclass(frozen=True, slots=True)
class Restriction:
    """One restriction line: ``subject`` reads ``pattern`` only masked (``mask``) or only the
    rows of ``row_filter``. Exactly one of the two is set."""

    subject: str
    pattern: ResourcePattern
    action: str  # as written: SELECT, READ or *
    effect: str  # canonical: "mask:show-last-4", "filter:region = 'eu'"
    line: int
    mask: Mask | None = None  # ``Mask.rule`` is this line's text
    row_filter: BooleanExpression | None = None

    @property
    def filter_text(self) -> str:
        """The filter expression as written (empty for a mask)."""
        return self.effect[len(FILTER_PREFIX):] if self.row_filter is not None else ""

    @property
    def text(self) -> str:
        """The line in canonical form; the effect is double-quoted when it needs to be."""
        return rule_text(self.subject, self.pattern.text, self.action, self.effect)

    @property
    def filters_nothing(self) -> bool:
        """A ``filter:true``: restricts no row."""
        return self.row_filter is not None and self.row_filter == AlwaysTrue()


def rule_text(subject: str, resource: str, action: str, effect: str) -> str:
    """A ``p`` line from its fields (the effect quoted if it holds a comma or a quote)."""
    return f"p, {subject}, {resource}, {action}, {quote_field(effect)}"


def quote_field(value: str) -> str:
    """A field as a policy line writes it: in double quotes (``""`` inside) if it must be."""
    if "," in value or '"' in value:
        return '"' + value.replace('"', '""') + '"'
    return value


def unquote_field(value: str) -> str:
    """A field without its enclosing double quotes (``""`` inside is one quote); unquoted
    fields are returned as they are. Raises ``ValueError`` for a malformed quoted field."""
    if not (len(value) >= 2 and value.startswith('"') and value.endswith('"')):
        return value
    inner = value[1:-1]
    if '"' in inner.replace('""', ""):
        raise ValueError(f"malformed quoted field {value}: inside the quotes write \"\" for "
                         "each double quote")
    return inner.replace('""', '"')


def is_restriction(effect: str) -> bool:
    """True for a mask or filter effect (whether or not it is well formed)."""
    return effect.startswith((MASK_PREFIX, FILTER_PREFIX))


def parse_restriction(subject: str, pattern: ResourcePattern, action: str,
                      actions: frozenset[Action], effect: str, line: int) -> Restriction:
    """A restriction line, validated; raises ``ValueError`` saying what is wrong."""
    kind = "mask" if effect.startswith(MASK_PREFIX) else "row filter"
    if Action.SELECT not in actions:
        raise ValueError(f"a {kind} restricts reads: its action must be SELECT, READ or * "
                         f"(got {action})")
    if effect.startswith(MASK_PREFIX):
        _check_reaches(pattern, COLUMN_SEGMENTS, "a mask applies to columns: the resource must "
                       "be catalog.namespace.table.column")
        action_text, value = _mask_parts(effect[len(MASK_PREFIX):])
        canonical = MASK_PREFIX + action_text + ("" if value is None else ":" + value)
        mask = Mask(MaskAction(action_text), value,
                    rule_text(subject, pattern.text, action, canonical))
        return Restriction(subject, pattern, action, canonical, line, mask=mask)
    _check_reaches(pattern, TABLE_SEGMENTS, "a row filter applies to tables: the resource must "
                   "be catalog.namespace.table")
    text = effect[len(FILTER_PREFIX):].strip()
    expression = parse_row_filter(text)
    return Restriction(subject, pattern, action, FILTER_PREFIX + text, line,
                       row_filter=expression)


def mask_from_effect(effect: str) -> Mask:
    """The mask a ``mask:<action>[:<value>]`` text stands for (no rule); ``ValueError`` if it
    is not one."""
    if not effect.startswith(MASK_PREFIX):
        raise ValueError(f"expected mask:<action>[:<value>], got {effect!r}")
    action_text, value = _mask_parts(effect[len(MASK_PREFIX):])
    return Mask(MaskAction(action_text), value)


def _check_reaches(pattern: ResourcePattern, fewest: int, message: str) -> None:
    if not pattern.open and len(pattern.segments) < fewest:
        raise ValueError(f"{message} (or a wildcard pattern reaching one); {pattern.text} has "
                         f"{len(pattern.segments)} segment(s)")


def _mask_parts(text: str) -> tuple[str, str | None]:
    """``show-last-4`` -> (show-last-4, None); ``mask-to-fixed-value:X`` -> (…, X)."""
    action_text, colon, value = text.partition(":")
    action_text = action_text.strip()
    try:
        action = MaskAction(action_text)
    except ValueError:
        known = ", ".join(MaskAction)
        raise ValueError(f"unknown mask action {action_text!r} (expected one of: {known})") \
            from None
    if action == MaskAction.MASK_TO_FIXED_VALUE:
        if not colon or not value:
            raise ValueError("mask-to-fixed-value needs a value: "
                             "mask:mask-to-fixed-value:<value>")
        return action_text, value
    if colon:
        raise ValueError(f"mask action {action_text!r} takes no value (got ':{value}'); only "
                         "mask-to-fixed-value does")
    return action_text, None


def parse_row_filter(text: str) -> BooleanExpression:
    """An unbound Iceberg expression from pyiceberg's SQL-like syntax; ``ValueError`` if the
    text is not one (the message says where it stops making sense)."""
    if not text:
        raise ValueError("empty row filter: write filter:<expression>, e.g. filter:region = 'eu'")
    try:
        return parse_expression(text)
    except Exception as exc:  # pyparsing's ParseException, RecursionError on absurd nesting
        where = getattr(exc, "loc", None)
        at = f" at character {where + 1}" if isinstance(where, int) else ""
        raise ValueError(f"cannot parse the row filter {text!r}{at}: write an Iceberg "
                         "expression such as region = 'eu' or region IN ('eu', 'us') "
                         "(quote the whole field when it contains a comma)") from None
