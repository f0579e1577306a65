"""``icegov policy``: check, explain and test policies without running the proxy.

Each command reads ``--model``/``--policy`` (defaults: the settings' paths, also from
``ICEGOV__POLICY__MODEL_PATH``/``ICEGOV__POLICY__POLICY_PATH``). Exit codes: 0 success; 1 policy
errors (``check``) or failing cases (``test``); 2 unusable input (missing file, a policy that
does not load, a malformed case file).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from proxy.governance import Action, Principal
from proxy.policy.cases import CaseError, parse_cases, run_cases
from proxy.policy.decisions import Explanation, can_see, explain
from proxy.policy.explain_reads import read_lines
from proxy.policy.lint import check
from proxy.policy.loader import CompiledPolicy, PolicyFiles, compile_files, read_files
from proxy.policy.model import reference_allows, reference_enforcer
from proxy.policy.patterns import PatternError, resource_from_text
from proxy.policy.rules import PolicyError
from proxy.policy.settings import PolicySettings
from proxy.resources import Resource, ResourceKind

F = TypeVar("F", bound=Callable[..., Any])
DEFAULTS = PolicySettings()
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def policy_files(command: F) -> F:
    """The ``--model`` and ``--policy`` options every subcommand takes."""
    command = click.option("--policy", "policy_path", type=EXISTING_FILE,
                           default=DEFAULTS.policy_path, show_default=True,
                           envvar="ICEGOV__POLICY__POLICY_PATH",
                           help="The policy rules ('p' and 'g' lines).")(command)
    return click.option("--model", "model_path", type=EXISTING_FILE,
                        default=DEFAULTS.model_path, show_default=True,
                        envvar="ICEGOV__POLICY__MODEL_PATH",
                        help="The Casbin model.")(command)


@click.group("policy")
def policy() -> None:
    """Check, explain and test access policies (policies/README.md describes the format)."""


@policy.command("check")
@policy_files
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
def check_command(model_path: Path, policy_path: Path, strict: bool) -> None:
    """Report errors (the proxy would refuse the policy) and warnings (rules with no effect)."""
    files = _read(model_path, policy_path)
    problems = check(files)
    for problem in problems:
        click.echo(str(problem))
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    click.echo(f"{policy_path}: {errors} error(s), {warnings} warning(s)")
    if errors or (strict and warnings):
        raise SystemExit(1)


@policy.command("explain")
@policy_files
@click.option("--principal", required=True, help="The caller's name.")
@click.option("--role", "roles", multiple=True, help="A role from the caller's token (repeat).")
@click.option("--action", required=True, type=click.Choice([a.value for a in Action]))
@click.option("--resource", "resource_text", required=True,
              help='In the text form, e.g. icegov.demo.events or icegov."demo.priv".t.')
@click.option("--kind", type=click.Choice([k.value for k in ResourceKind]), default=None,
              help="What the resource is (default: 1 segment a catalog, 2 a namespace, "
                   "more a table).")
@click.option("--columns", "column_lists", multiple=True, metavar="A,B,C",
              help="With SELECT on a table: show each of these columns' verdict.")
def explain_command(model_path: Path, policy_path: Path, principal: str, roles: tuple[str, ...],
                    action: str, resource_text: str, kind: str | None,
                    column_lists: tuple[str, ...]) -> None:
    """Print the decision for one request, the rule that decided it, every rule that matched,
    and whether the principal sees the resource at all. For SELECT on a table, also its row
    filter and column rules (each column's verdict with --columns); on a column, its verdict."""
    resource = _resource(resource_text, kind)
    columns = [name.strip() for names in column_lists for name in names.split(",")
               if name.strip()]
    if columns and (action != Action.SELECT or resource.kind != ResourceKind.TABLE):
        raise click.BadParameter("--columns goes with --action SELECT on a table",
                                 param_hint="--columns")
    compiled = _load(model_path, policy_path)
    who = Principal(principal, roles)
    explanation = explain(compiled, who, Action(action), resource)
    for line in _explanation_lines(explanation, policy_path):
        click.echo(line)
    if action == Action.SELECT:
        for line in read_lines(compiled, who, resource, columns, str(policy_path)):
            click.echo(line)
    sees = "yes" if can_see(compiled, who, resource) else "no, hidden (404)"
    click.echo(f"  visible:    {sees}, as a {resource.kind}")
    enforcer = reference_enforcer(compiled.files.model_text, compiled.parsed)
    agrees = reference_allows(enforcer, who, action, resource) == explanation.decision.allowed
    click.echo(f"  casbin:     {'agrees' if agrees else 'DISAGREES (please report this)'}")


def _resource(text: str, kind: str | None) -> Resource:
    try:
        return resource_from_text(text, None if kind is None else ResourceKind(kind))
    except PatternError as exc:
        raise click.BadParameter(str(exc), param_hint="--resource") from None


def _explanation_lines(explanation: Explanation, policy_path: Path) -> list[str]:
    decision = explanation.decision
    deciding = explanation.deciding
    verdict = "ALLOW" if decision.allowed else "DENY"
    lines = [f"{verdict} {decision.action} on {decision.resource}",
             "  decided by: " + (f"{policy_path}:{deciding.line}: {deciding.text}"
                                 if deciding else "no rule matched (default deny)"),
             f"  acts as:    {', '.join(explanation.subjects)}"]
    lines += [f"  matched:    {policy_path}:{rule.line}: {rule.text}"
              for rule in explanation.matched]
    return lines


@policy.command("test")
@policy_files
@click.argument("case_files", nargs=-1, required=True, type=EXISTING_FILE)
def test_command(model_path: Path, policy_path: Path, case_files: tuple[Path, ...]) -> None:
    """Run YAML test cases against the policy; fail if any decision is not the expected one."""
    compiled = _load(model_path, policy_path)
    total = failed = 0
    for case_file in case_files:
        try:
            cases = parse_cases(case_file.read_text(encoding="utf-8"))
        except (CaseError, UnicodeDecodeError) as exc:
            click.echo(f"{case_file}: {exc}", err=True)
            raise SystemExit(2) from None
        failures = run_cases(compiled, cases)
        for failure in failures:
            click.echo(f"FAIL {case_file} {failure}")
        total, failed = total + len(cases), failed + len(failures)
    click.echo(f"{total} case(s): {total - failed} passed, {failed} failed")
    if failed:
        raise SystemExit(1)


def _read(model_path: Path, policy_path: Path) -> PolicyFiles:
    try:
        return read_files(model_path, policy_path)
    except (OSError, PolicyError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None


def _load(model_path: Path, policy_path: Path) -> CompiledPolicy:
    try:
        return compile_files(_read(model_path, policy_path))
    except PolicyError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        click.echo("the policy does not load (run 'icegov policy check')", err=True)
        raise SystemExit(2) from None
