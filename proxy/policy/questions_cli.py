"""``icegov policy who-can``, ``why`` and ``diff``: the questions policy authors ask, answered
from the real files with the proxy's own decisions (``whocan``, ``why``, ``diff``, ``flips``).

Exit codes as the other ``icegov policy`` commands: 0 answered; 1 ``why`` found a replay that
disagrees with the record or a digest mismatch; 2 unusable input (a policy that does not load,
an unreadable file, no record with that id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from proxy import defaults
from proxy.audit.query import raw_lines, stream_paths
from proxy.governance import Action
from proxy.policy.cli import _explanation_lines, _load, _resource, policy_files
from proxy.policy.diff import GrantChange, PolicyDiff, diff_policies
from proxy.policy.diff_audit import collection_paused, diff_and_flips
from proxy.policy.explain_reads import read_lines
from proxy.policy.flips import Flip
from proxy.policy.loader import CompiledPolicy, compile_files
from proxy.policy.rules import PolicyError
from proxy.policy.whocan import Candidate, answer_lines, candidates, merged, who_can
from proxy.policy.why import (
    PolicyTrail,
    digest_note,
    find_requests,
    principal_of,
    record_digest,
    replay,
)

FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
DIRECTORY = click.Path(exists=True, file_okay=False, path_type=Path)


def principals_option(command: click.decorators.FC) -> click.decorators.FC:
    """``--principals``: the principals file whose names and roles are asked about."""
    return click.option("--principals", "principals_path", type=FILE,
                        default=lambda: defaults.default_path(defaults.PRINCIPALS),
                        envvar="ICEGOV__IDENTITY__PRINCIPALS_FILE",
                        help="Principals (names and roles) to ask about, besides every role "
                             "the policy names.")(command)


PrincipalsReader = Callable[[Path], dict[str, tuple[str, ...]]]
"""Reads a principals file into names and roles; raises ``ValueError`` with a message of its
own when it cannot (the identity room's reader, given by ``proxy.cli``: this room may not
import it)."""

_readers: list[PrincipalsReader] = []


def read_principals_with(reader: PrincipalsReader) -> None:
    """Use ``reader`` for ``--principals`` (``proxy.cli`` gives the identity room's)."""
    _readers[:] = [reader]


def _principals(path: Path | None) -> dict[str, tuple[str, ...]]:
    if path is None or not path.exists() or not _readers:
        return {}
    try:
        return _readers[0](path)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None


@click.command("who-can")
@policy_files
@principals_option
@click.argument("action", type=click.Choice([a.value for a in Action]))
@click.argument("resource_text", metavar="RESOURCE")
@click.option("--kind", type=click.Choice(["catalog", "namespace", "table", "column"]),
              default=None, help="What RESOURCE is (default: by its number of segments).")
def who_can_command(model_path: Path, policy_path: Path, principals_path: Path | None,
                    action: str, resource_text: str, kind: str | None) -> None:
    """Every principal and role that may do ACTION on RESOURCE, the line that allows it and,
    for SELECT on a table, the column denies, masks and row filter that narrow it."""
    resource = _resource(resource_text, kind)
    compiled = _load(model_path, policy_path)
    among = candidates(compiled, _principals(principals_path))
    answers = who_can(compiled, Action(action), resource, among)
    for line in answer_lines(answers, Action(action), resource, str(policy_path)):
        click.echo(line)


@click.command("why")
@policy_files
@click.argument("request_id")
@click.option("--audit", "audit_files", type=FILE, multiple=True, required=True,
              help="An audit file (repeat; a live file's rotated siblings are read too).")
def why_command(model_path: Path, policy_path: Path, request_id: str,
                audit_files: tuple[Path, ...]) -> None:
    """Find REQUEST_ID's record, replay each decision it logged against the policy it was made
    under (kept in the trail's policy records; else the files given) and print the rule trace.
    Several requests logged under the one id (a client may choose its id) are each replayed."""
    trail = PolicyTrail()
    with _readable():
        requests = find_requests(request_id, trail.watch(raw_lines(stream_paths(audit_files))))
    if not requests:
        click.echo(f"error: no record with request id {request_id!r}", err=True)
        raise SystemExit(2)
    if len(requests) > 1:
        click.echo(f"note: {len(requests)} different requests were logged with request id "
                   f"{request_id!r} (a client may choose its request id): each is replayed")
    fine = [_why_one(request_id, record, trail, model_path, policy_path)
            for record in requests]
    if not all(fine):
        raise SystemExit(1)


def _why_one(request_id: str, record: dict[str, Any], trail: PolicyTrail, model_path: Path,
             policy_path: Path) -> bool:
    """Print one request's replay; True if its policy is known and every replay agrees."""
    caller = principal_of(record)
    if caller is None and record.get("principal") is not None:
        click.echo(f"error: the record of {request_id!r} is not one icegov writes: its caller "
                   "is not a name with a list of role names", err=True)
        raise SystemExit(2)
    compiled, usable, note = _policy_of(record, trail, model_path, policy_path)
    click.echo(f"request {request_id}: {record.get('method')} {record.get('path')} by "
               f"{record.get('principal')} (roles: {', '.join(caller.roles if caller else ())}) "
               f"at {record.get('time')}: {record.get('decision')}, status {record.get('status')}")
    click.echo(f"  {note}")
    return _print_replays(record, compiled) and usable


def _policy_of(record: dict[str, Any], trail: PolicyTrail, model_path: Path,
               policy_path: Path) -> tuple[CompiledPolicy, bool, str]:
    """The policy to replay against, whether it is the one the record was decided under, and
    what to say about it."""
    logged = record_digest(record)
    audited = trail.get(logged) if logged else None
    if audited is None:
        compiled = _load(model_path, policy_path)
        return (compiled, *digest_note(record, compiled))
    try:
        compiled = compile_files(audited.files)
    except PolicyError as exc:  # the trail's copy is what loaded then; say why it does not now
        click.echo(f"error: the recorded policy {audited.files.digest[:12]} does not compile "
                   f"here: {exc}", err=True)
        raise SystemExit(2) from None
    return compiled, True, (f"replayed against the policy it was decided under: digest "
                            f"{audited.files.digest[:12]}, generation {audited.generation}, "
                            f"loaded {audited.time} from {audited.files.policy_path} (as the "
                            f"audit trail recorded it)")


def _print_replays(record: dict[str, Any], compiled: CompiledPolicy) -> bool:
    """Print every replayed decision's rule trace; True if each agrees with the record."""
    replays = replay(record, compiled)
    if not replays:
        click.echo("  the record logged no policy decision (nothing to replay)")
    source = compiled.files.policy_path
    for item in replays:
        logged = "ALLOW" if item.logged.get("allowed") else "DENY"
        click.echo(f"logged {logged} by {item.logged.get('rule') or 'default deny'}; replay "
                   f"{'agrees' if item.agrees else 'DIFFERS'}:")
        for line in _explanation_lines(item.explanation, source):
            click.echo(line)
        if item.explanation.decision.action == Action.SELECT:
            caller = principal_of(record)
            assert caller is not None  # a replayed record names its caller
            for line in read_lines(compiled, caller, item.resource, (), str(source)):
                click.echo(line)
    return all(item.agrees for item in replays)


@click.command("diff")
@principals_option
@click.argument("old_dir", type=DIRECTORY)
@click.argument("new_dir", type=DIRECTORY)
@click.option("--audit", "audit_files", type=FILE, multiple=True,
              help="Also list the logged decisions the change flips (repeat; rotated siblings "
                   "are read too).")
def diff_command(principals_path: Path | None, old_dir: Path, new_dir: Path,
                 audit_files: tuple[Path, ...]) -> None:
    """The grants (who, action, resource) NEW_DIR's policy gains and loses over OLD_DIR's.

    Each directory holds model.conf and policy.csv (as policies/ does). A resource shown with
    '*' stands for any name no rule mentions.
    """
    with collection_paused():
        _diff(principals_path, old_dir, new_dir, audit_files)


def _diff(principals_path: Path | None, old_dir: Path, new_dir: Path,
          audit_files: tuple[Path, ...]) -> None:
    old, new = (_load_dir(d) for d in (old_dir, new_dir))

    def among() -> list[Candidate]:
        return merged(candidates(old, {}), candidates(new, _principals(principals_path)))

    if not audit_files:
        click.echo("\n".join(diff_lines(diff_policies(old, new, among()))))
        return
    with _readable():
        found, flipped = diff_and_flips(old, new, among, stream_paths(audit_files))
    click.echo("\n".join(diff_lines(found) + flip_lines(flipped)))


@contextmanager
def _readable() -> Iterator[None]:
    """An audit file that cannot be read (gone, a FIFO, a folder) ends the command: exit 2."""
    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"error: cannot read {where}{exc.strerror or type(exc).__name__}", err=True)
        raise SystemExit(2) from None


def _load_dir(directory: Path) -> CompiledPolicy:
    model, rules = directory / defaults.MODEL, directory / defaults.POLICY
    for path in (model, rules):
        if not path.is_file():
            click.echo(f"error: {path} does not exist", err=True)
            raise SystemExit(2)
    return _load(model, rules)


def diff_lines(found: PolicyDiff) -> list[str]:
    """What diff prints: changed lines, then grants gained and lost."""
    lines = [f"lines removed: {len(found.lines_removed)}, added: {len(found.lines_added)}"]
    lines += [f"  - {text}" for text in found.lines_removed]
    lines += [f"  + {text}" for text in found.lines_added]
    for title, changes in (("gained", found.gained), ("lost", found.lost)):
        lines.append(f"grants {title}: {len(changes)}")
        lines += [_change_line(change) for change in changes]
    return lines


def _change_line(change: GrantChange) -> str:
    rule = change.new_rule if change.gained else change.old_rule
    other = change.old_rule if change.gained else change.new_rule
    return (f"  {change.kind} {change.who}: {change.action} on {change.resource}  "
            f"[{'now' if change.gained else 'was'}: {rule}; "
            f"{'was' if change.gained else 'now'}: {other or 'default deny'}]")


def flip_lines(found: list[Flip]) -> list[str]:
    """What diff --audit prints: every logged decision that flips."""
    lines = [f"logged decisions that flip: {len(found)}"]
    lines += [f"  {f.time} {f.request_id} {f.principal}: {f.action} on {f.resource}: "
              f"logged {'allow' if f.logged else 'deny'}, now {'allow' if f.now else 'deny'}"
              for f in found]
    return lines
