"""The Casbin model (``model.conf``): the policy's semantics, stated in Casbin's language.

icegov decides with a compiled index (``proxy.policy.index``) that implements exactly the model
below, so a ``model.conf`` that says anything else is refused rather than silently ignored. Casbin
itself parses the model and serves as the reference implementation: ``reference_enforcer`` builds
a real ``casbin.Enforcer`` over the same rules (used by ``icegov policy explain`` and the tests to
check that both agree).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import casbin
from casbin.model import Model

from proxy.governance import Principal
from proxy.policy.patterns import action_match, resource_match
from proxy.policy.rules import ParsedPolicy, Problem
from proxy.resources import Resource

CANONICAL_MODEL = """\
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act, eft

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = g(r.sub, p.sub) && resourceMatch(r.obj, p.obj, p.eft) && actionMatch(r.act, p.act)
"""
"""The one model icegov evaluates (comments and spacing in ``model.conf`` may differ)."""

SECTIONS = {"r": "request_definition", "p": "policy_definition", "g": "role_definition",
            "e": "policy_effect", "m": "matchers"}


def parse_model(text: str) -> Model:
    """Parse model text with Casbin's own parser."""
    model = Model()
    model.load_model_from_text(text)
    return model


def _definitions(model: Model) -> dict[str, str]:
    """Every ``key = value`` of a parsed model, whitespace removed (``r`` -> ``sub,obj,act``)."""
    return {key: re.sub(r"\s+", "", assertion.value)
            for section in model.model.values() for key, assertion in section.items()}


_EXPECTED = _definitions(parse_model(CANONICAL_MODEL))


def check_model(text: str, source: str) -> list[Problem]:
    """Problems with a model text: unparseable, or not the model icegov implements."""
    try:
        found = _definitions(parse_model(text))
    except Exception as exc:  # Casbin raises bare Exceptions of several kinds
        return [Problem(source, None, f"cannot parse the Casbin model: {exc}")]
    problems = [_mismatch(source, key, want, found.get(key)) for key, want in _EXPECTED.items()]
    problems += [Problem(source, None, f"unsupported definition {key!r}: icegov evaluates "
                         "exactly one request, policy, role, effect and matcher definition")
                 for key in found.keys() - _EXPECTED.keys()]
    return [p for p in problems if p is not None]


def _mismatch(source: str, key: str, want: str, got: str | None) -> Problem | None:
    if got == want:
        return None
    canonical = next(line for line in CANONICAL_MODEL.splitlines() if line.startswith(key + " "))
    if got is None:
        return Problem(source, None, f"[{SECTIONS[key]}] is missing {canonical!r}")
    return Problem(source, None, f"[{SECTIONS[key]}] must be {canonical!r}: icegov implements "
                   "this model only (see policies/README.md)")


def reference_enforcer(model_text: str, policy: ParsedPolicy) -> Any:
    """A real ``casbin.Enforcer`` over ``policy`` (restriction lines included), with icegov's
    matcher functions registered."""
    model = parse_model(model_text)
    model.model["p"]["p"].policy.extend(
        [rule.subject, rule.pattern.text, rule.action, "allow" if rule.allow else "deny"]
        for rule in policy.rules)
    # mask and filter lines as written: Casbin's effector counts an effect other than allow or
    # deny as indeterminate, so they must change no decision (the agreement tests check it)
    model.model["p"]["p"].policy.extend(
        [rule.subject, rule.pattern.text, rule.action, rule.effect]
        for rule in policy.restrictions)
    model.model["g"]["g"].policy.extend([grant.member, grant.role] for grant in policy.grants)
    logging.getLogger("casbin").setLevel(logging.WARNING)  # it would print the whole model
    enforcer = casbin.Enforcer(model)
    enforcer.add_function("resourceMatch", resource_match)
    enforcer.add_function("actionMatch", action_match)
    enforcer.build_role_links()
    return enforcer


def reference_allows(enforcer: Any, principal: Principal, action: str,
                     resource: Resource) -> bool:
    """Casbin's answer for a principal: every subject (name and token roles), a deny wins.

    Casbin's matcher functions receive strings: the resource goes to Casbin in its canonical
    text form and ``resourceMatch`` parses it back into segments.
    """
    subjects = (principal.name, *principal.roles)
    verdicts = [_verdict(enforcer, subject, str(resource), action) for subject in subjects]
    return "allow" in verdicts and "deny" not in verdicts


def reference_denies(enforcer: Any, principal: Principal, action: str,
                     resource: Resource) -> bool:
    """True if a deny of Casbin's matches for some subject of the principal: for a column and
    SELECT, whether the column is denied (its table's SELECT is decided apart)."""
    subjects = (principal.name, *principal.roles)
    return any(_verdict(enforcer, s, str(resource), action) == "deny" for s in subjects)


def _verdict(enforcer: Any, subject: str, resource: str, action: str) -> str | None:
    """``allow``/``deny`` if a rule for ``subject`` matched, else None (no rule)."""
    allowed, explain = enforcer.enforce_ex(subject, resource, action)
    if allowed:
        return "allow"
    # AllowAndDenyEffector reports the deny that stopped it; an empty explanation is "no rule"
    return "deny" if explain else None
