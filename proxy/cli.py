"""The ``icegov`` command line.

Start-up problems an operator can fix — bad settings, a missing or broken policy or principals
file, unusable identity settings — are one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import structlog

from proxy import defaults
from proxy.ops.logs import configure_logging
from proxy.policy.rules import PolicyError

if TYPE_CHECKING:
    from proxy.settings import Settings

log = structlog.get_logger("icegov")


def startup_errors() -> tuple[type[BaseException], ...]:
    """What an operator can fix when icegov cannot start. Imported here, not at the top: the
    server stack (settings, catalog drivers, uvicorn) loads only for the commands that serve,
    so ``icegov policy`` and ``icegov audit`` start in a fraction of the time."""
    from proxy.catalog.store import CatalogDriverMissing
    from proxy.identity.principals import PrincipalsFileError
    from proxy.identity.settings import IdentityConfigError
    from proxy.settings import SettingsError

    return (SettingsError, PolicyError, PrincipalsFileError, IdentityConfigError, OSError,
            CatalogDriverMissing)


class StartupError(click.ClickException):
    """Why icegov cannot start, shown as one line on stderr (exit status 2)."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"icegov: error: {self.format_message()}", err=True)


def describe_startup_error(exc: BaseException) -> str:
    """One line saying what is wrong: the file or setting, and the reason."""
    from proxy.settings import SettingsError

    if isinstance(exc, SettingsError):
        return f"bad settings: {exc}"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"cannot start: {where}{exc.strerror or type(exc).__name__}"
    if isinstance(exc, PolicyError):
        return f"policy not loaded: {exc}"
    return " ".join(str(exc).split())


def _settings(**options: Any) -> Settings:
    """Settings from the environment, overridden by the flags actually given."""
    from proxy.settings import SettingsError, load_settings

    given = {k: v for k, v in options.items() if v is not None}
    try:
        settings = load_settings(**given)
    except SettingsError as exc:
        raise StartupError(describe_startup_error(exc)) from None
    configure_logging(settings.log_level)
    return settings


KEEP_ALIVE_SECONDS = 75
"""How long an idle client connection stays open. Longer than clients' pools keep theirs
(uvicorn's 5 s default lets a client reuse a connection the server is just closing: a POST that
fails with a reset, which clients do not retry)."""


def _run(app: Any, settings: Settings, **extra: Any) -> None:
    import uvicorn

    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=None, access_log=False, proxy_headers=False, server_header=False,
                timeout_keep_alive=KEEP_ALIVE_SECONDS, ws="none", **extra)


def _without_audit_file(settings: Settings) -> Settings:
    audit = settings.audit.model_copy(update={"file": None, "stdout": False})
    return settings.model_copy(update={"audit": audit})


def _run_workers(settings: Settings, count: int, flags: dict[str, Any]) -> None:
    """``count`` uvicorn worker processes on one port, sharing keys, metrics and nothing else
    (``proxy.ops.workers``)."""
    from proxy.ops.workers import flag_variables, prepare_workers, shared_keys

    variables = {**flag_variables(flags), **shared_keys(settings)}
    with prepare_workers(count, variables):
        _run("proxy.app:create_worker_app", settings, factory=True, workers=count)


def _announce_policy(settings: Settings) -> None:
    """Log which policy files are in force, loudly when any is a packaged demo file."""
    files = {"model": settings.policy.model_path, "policy": settings.policy.policy_path,
             "principals": settings.identity.principals_file}
    paths = {kind: str(path) for kind, path in files.items()}
    demo = [kind for kind, path in files.items() if path is not None and defaults.is_packaged(path)]
    if demo:
        log.warning("policy.demo", demo=demo, note="serving the DEMO files packaged with icegov "
                    "(the demo principals' secrets are public); `icegov init policies` writes "
                    "editable copies", **paths)
    else:
        log.info("policy.files", **paths)


@click.group()
@click.version_option(package_name="icegov")
def main() -> None:
    """icegov: a governance proxy for Apache Iceberg REST catalogs."""
    configure_logging()


@main.command()
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8181).")
@click.option("--catalog-uri", help="Backing Iceberg REST catalog; omit to serve the embedded one.")
@click.option("--catalog-token", help="Static bearer token for the backing catalog.")
@click.option("--catalog-credential", help="OAuth2 'client_id:secret' for the backing catalog.")
@click.option("--catalog-oauth-uri", help="Backing token endpoint (default {uri}/v1/oauth/tokens).")
@click.option("--warehouse",
              help="Embedded catalog warehouse: a directory (default ./warehouse) or an "
                   "s3://bucket/prefix URI (then --catalog-db-uri is required).")
@click.option("--catalog-db-uri", help="Embedded catalog SQLAlchemy URI (default SQLite).")
@click.option("--max-body-bytes", type=int, help="Largest request body accepted.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes on the one port (they share keys and metrics; each "
                   "writes its own audit file).")
def serve(workers: int, **options: Any) -> None:
    """Serve the proxy in front of a backing catalog (the embedded one by default)."""
    from proxy.app import create_app

    settings = _settings(**options)
    _announce_policy(settings)
    try:  # with workers, only a check: each worker writes its own audit file
        app = create_app(settings if workers == 1 else _without_audit_file(settings))
    except startup_errors() as exc:
        raise StartupError(describe_startup_error(exc)) from None
    if workers == 1:
        _run(app, settings)
        return
    _run_workers(settings, workers, options)


@main.command()
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8181).")
@click.option("--warehouse",
              help="Warehouse: a directory (default ./warehouse) or an s3://bucket/prefix URI.")
@click.option("--catalog-db-uri",
              help="SQLAlchemy URI (default SQLite in a local warehouse).")
def catalog(**options: Any) -> None:
    """Serve the embedded Iceberg REST catalog alone, with no proxy in front."""
    from proxy.catalog import EmbeddedCatalog

    settings = _settings(**options)
    try:
        app = EmbeddedCatalog.from_settings(settings).app
    except startup_errors() as exc:
        raise StartupError(describe_startup_error(exc)) from None
    _run(app, settings)


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path),
                default=defaults.LOCAL_DIR)
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
def init(directory: Path, force: bool) -> None:
    """Write editable copies of the demo policy into DIRECTORY (default ./policies).

    The copies: model.conf, policy.csv, principals.yaml and README.md (the policy language).
    """
    try:
        written = defaults.write_copies(directory, overwrite=force)
    except defaults.InitError as exc:
        raise StartupError(str(exc)) from None
    click.echo(f"wrote {', '.join(str(path) for path in written)}")
    click.echo(_init_next_steps(directory.resolve()))


def _init_next_steps(directory: Path) -> str:
    env = {"ICEGOV__POLICY__MODEL_PATH": directory / defaults.MODEL,
           "ICEGOV__POLICY__POLICY_PATH": directory / defaults.POLICY,
           "ICEGOV__IDENTITY__PRINCIPALS_FILE": directory / defaults.PRINCIPALS}
    exports = "\n".join(f"  export {name}={shlex.quote(str(path))}" for name, path in env.items())
    where = "Point icegov at them:\n"
    if directory.name == defaults.LOCAL_DIR.name:
        where = (f"icegov serve, started in {directory.parent}, reads them as ./policies; "
                 "from anywhere else, point it at them:\n")
    return (f"{where}{exports}\n"
            "The demo principals' secrets are public (README.md): replace them with entries from "
            "`icegov principal add NAME --role ROLE` before serving real data.")


def _register_groups() -> None:
    from proxy.audit.cli import audit
    from proxy.identity.cli import principal
    from proxy.indexes.cli import index
    from proxy.policy.cli import policy

    main.add_command(principal)
    main.add_command(index)
    main.add_command(policy)
    main.add_command(audit)
    _add_policy_questions()


def _add_policy_questions() -> None:
    """``icegov policy who-can/why/diff`` and ``icegov audit query`` (issue 24)."""
    from proxy.audit.cli import audit
    from proxy.audit.query_cli import query_command
    from proxy.identity.principals import PrincipalsFileError, load_principals
    from proxy.policy.cli import policy
    from proxy.policy.questions_cli import (
        diff_command,
        read_principals_with,
        who_can_command,
        why_command,
    )

    def principals(path: Path) -> dict[str, tuple[str, ...]]:
        try:
            return {name: entry.roles for name, entry in load_principals(path).items()}
        except PrincipalsFileError as exc:
            raise ValueError(str(exc)) from None

    read_principals_with(principals)
    for command in (who_can_command, why_command, diff_command):
        policy.add_command(command)
    audit.add_command(query_command)


_register_groups()

if __name__ == "__main__":
    main()
