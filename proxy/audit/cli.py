"""``icegov audit``: check that an audit stream is whole and untouched."""

from __future__ import annotations

from pathlib import Path

import click

from proxy.audit.anchors import parse_anchor
from proxy.audit.chain import Link
from proxy.audit.ocsf_export import ExportError, export_ocsf
from proxy.audit.verify import Broken, NeedsKey, verify
from proxy.audit.verify_digests import keygen_command, verify_with_digests


class Unreadable(click.ClickException):
    """The files cannot be checked at all (exit status 2, unlike a broken chain's 1)."""

    exit_code = 2


class AnchorType(click.ParamType[Link, object]):
    """A ``SEQ:HASH`` pair: a record's seq and the hash it must carry."""

    name = "SEQ:HASH"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> Link:
        if isinstance(value, Link):
            return value
        try:
            return parse_anchor(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


ANCHOR = AnchorType()


@click.group()
def audit() -> None:
    """Audit stream tools."""


@audit.command(name="verify")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", envvar="ICEGOV__AUDIT__HMAC_KEY", show_envvar=True,
              help="HMAC key the records were sealed with (prefer the environment variable).")
@click.option("--anchor", "anchors", type=ANCHOR, multiple=True,
              help="A record the chain must hold with exactly this hash (repeatable), e.g. "
                   "from an audit.resumed or audit.closed log line kept elsewhere.")
@click.option("--expect-last", type=ANCHOR, default=None,
              help="The record the chain must end with: nothing cut after it, nothing added.")
@click.option("--writer", default=None, metavar="wN",
              help="Check only this worker's chain (records with \"writer\": \"wN\") in a "
                   "stream several `icegov serve --workers` workers wrote, e.g. their stdout.")
@click.option("--public-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Check the files against their signed digests with this "
                                 "Ed25519 public key (no secret needed).")
@click.option("--digests", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The digest file (default: <live file>.digests).")
@click.option("--require-hmac", is_flag=True,
              help="Fail on any record not sealed with HMAC (and, as always, on HMAC records "
                   "without the key).")
def verify_command(files: tuple[Path, ...], key: str | None, anchors: tuple[Link, ...],
                   expect_last: Link | None, require_hmac: bool, writer: str | None,
                   public_key: Path | None, digests: Path | None) -> None:
    """Check FILES, in order, as one chain: every line's bytes, hash, seq and link.

    Give rotated files oldest first, then the live file (`audit.log.* audit.log` sorts so).
    Exit 0 with a summary (which seal was checked, and the last record as SEQ:HASH to keep as
    the next anchor) when the chain is intact and holds every anchor; 1 naming the first bad
    record (file:line) and what is wrong with it; 2 when the files cannot be checked
    (unreadable, key missing, a malformed anchor). With --public-key, the signed digests are
    checked instead (see proxy/audit/README.md, "Signed digests").
    """
    if public_key is not None:
        verify_with_digests(files, public_key, digests, key)
        return
    try:
        result = verify(files, key.encode("utf-8") if key else None, anchors=anchors,
                        expect_last=expect_last, require_hmac=require_hmac, writer=writer)
    except NeedsKey as exc:
        raise click.UsageError(f"{exc} (--key or ICEGOV__AUDIT__HMAC_KEY)") from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise Unreadable(f"cannot read {where}{exc.strerror or type(exc).__name__}") \
            from None
    if isinstance(result, Broken):
        click.echo(f"audit chain broken: {result}")
        raise SystemExit(1)
    click.echo(str(result))


@audit.command(name="export-ocsf")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Root folder: one sub-folder per OCSF class, each a Security Lake source.")
@click.option("--region", default="local", show_default=True,
              help="The region partition (region=…): the AWS region of the Security Lake.")
@click.option("--account-id", default="000000000000", show_default=True,
              help="The account partition (accountId=…): the source's AWS account id.")
@click.option("--policy-version", default=None, metavar="DIGEST",
              help="The policy version of events whose records name no policy_digest "
                   "(records written before icegov wrote it).")
@click.option("--no-rotated", is_flag=True,
              help="Read only the files named, not their rotated siblings.")
def export_ocsf_command(files: tuple[Path, ...], out: Path, region: str, account_id: str,
                        policy_version: str | None, no_rotated: bool) -> None:
    """Write the records of FILES as OCSF Parquet under OUT, partitioned as Amazon Security
    Lake expects: OUT/<class>/region=R/accountId=A/eventDay=YYYYMMDD/*.parquet.

    A live file's rotated siblings (audit.log.<seq>-<time>) are read first, oldest first,
    unless --no-rotated (as `icegov audit query` reads them). Records are streamed, memory
    bounded whatever the input's size. Verify the files first (`icegov audit verify`): the
    export checks no chain. Exit 0 listing the files written; 2 when a line is not an audit
    record (nothing is written then).
    """
    try:
        written = export_ocsf(files, out, region, account_id, policy_version,
                              rotated=not no_rotated)
    except ExportError as exc:
        raise Unreadable(str(exc)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise Unreadable(f"cannot read {where}{exc.strerror or type(exc).__name__}") \
            from None
    for path in written:
        click.echo(str(path))


audit.add_command(keygen_command)
