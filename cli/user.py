"""``rlog user create|list|delete``: SCRAM users, whose credentials the cluster keeps in its
metadata log, as ``kafka-configs.sh --entity-type users --alter --add-config
SCRAM-SHA-256=[...]`` and ``rpk security user`` manage them.

A user has one credential per mechanism (SCRAM-SHA-256, SCRAM-SHA-512): a salt, an iteration
count and two keys derived from the password; the password itself is never sent or stored.
``create`` sets the credential of one mechanism (a new password, if the user had one), with a
random 32-byte salt from :mod:`secrets`. confluent-kafka's AdminClient sends it
(AlterUserScramCredentials): librdkafka salts the password with PBKDF2 (Hi() of RFC 5802) as
rlog.core.security.scram does, and only the salted password leaves this process. ``list``
shows each user's mechanisms and iterations (DescribeUserScramCredentials); ``delete``
removes a user's credentials, of every mechanism unless ``--mechanism`` names one.

The password comes from ``--password``, from the first line of stdin with
``--password-stdin``, or from a prompt on a terminal. A password on the command line is seen
by other users of the machine (``ps``); prefer the other two.
"""

from __future__ import annotations

import secrets
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from rlog.cli.admin import Admin, JsonOption, PropertyOption, open_admin
from rlog.cli.discovery import BootstrapOption, DataDirOption, kafka_error, settings_of
from rlog.cli.terminal import CliError, ExitCode
from rlog.core.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

app = typer.Typer(
    help="Create, list and delete SCRAM users (kafka-configs.sh --entity-type users; "
    "rpk security user).",
    no_args_is_help=True,
)

SALT_BYTES = 32
HEADERS = ("USER", "MECHANISM", "ITERATIONS")


class Mechanism(StrEnum):
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def scram(self) -> ScramMechanism:
        return ScramMechanism[self.name]


UserArgument = Annotated[str, typer.Argument(help="User name.", show_default=False)]


def read_password(password: str | None, password_stdin: bool) -> str:
    """The password from the flag, stdin's first line, or a prompt on a terminal."""
    if password is not None and password_stdin:
        raise CliError("give --password or --password-stdin, not both", ExitCode.USAGE)
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif password is None:
        if not sys.stdin.isatty():
            raise CliError(
                "no password: give --password-stdin (or --password) when stdin is not a terminal",
                ExitCode.USAGE,
            )
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise CliError("the password is empty", ExitCode.USAGE)
    return password


def _user_error(admin: Admin, exc: KafkaException, action: str, user: str) -> CliError:
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, KafkaError) and reason.code() == KafkaError.RESOURCE_NOT_FOUND:
        return CliError(f"unknown user {user!r}", ExitCode.NOT_FOUND)
    return kafka_error(exc, bootstrap=admin.bootstrap, action=f"{action} {user!r}")


def _wait(admin: Admin, future: Any, action: str, user: str) -> Any:
    try:
        return future.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        raise _user_error(admin, exc, action, user) from None
    except TimeoutError:
        raise admin.timeout_error(f"{action} {user!r}") from None


def describe_user(admin: Admin, user: str) -> dict[ScramMechanism, int]:
    """The user's mechanisms and their iterations; empty for a user without credentials."""
    futures = admin.client.describe_user_scram_credentials([user], request_timeout=admin.timeout_s)
    try:
        description = _wait(admin, futures[user], "describe user", user)
    except CliError as error:
        if error.code is ExitCode.NOT_FOUND:
            return {}
        raise
    return {info.mechanism: info.iterations for info in description.scram_credential_infos}


@app.command(no_args_is_help=True)
def create(
    ctx: typer.Context,
    user: UserArgument,
    password: Annotated[
        str | None,
        typer.Option(
            "--password", "-p", help="The password (visible to ps: prefer --password-stdin)."
        ),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin's first line.")
    ] = False,
    mechanism: Annotated[
        Mechanism, typer.Option("--mechanism", "-m", help="The SCRAM mechanism.")
    ] = Mechanism.SCRAM_SHA_256,
    iterations: Annotated[
        int,
        typer.Option(
            "--iterations",
            min=MIN_ITERATIONS,
            max=MAX_ITERATIONS,
            help="PBKDF2 iterations (Kafka accepts 4096 to 16384).",
        ),
    ] = DEFAULT_ITERATIONS,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Create a SCRAM user, or give one a new password for this mechanism."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    if not user:
        raise CliError("the user name is empty", ExitCode.USAGE)
    secret = read_password(password, password_stdin)
    admin = open_admin(settings, properties)
    existed = mechanism.scram in describe_user(admin, user)
    upsertion = UserScramCredentialUpsertion(
        user,
        ScramCredentialInfo(mechanism.scram, iterations),
        secret.encode(),
        secrets.token_bytes(SALT_BYTES),
    )
    futures = admin.client.alter_user_scram_credentials(
        [upsertion], request_timeout=settings.timeout_s
    )
    _wait(admin, futures[user], "create user", user)
    done = "Updated" if existed else "Created"
    settings.terminal.line(f"{done} user {user} ({mechanism.value}, {iterations} iterations).")


@app.command("list")
def list_users(
    ctx: typer.Context,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """List the SCRAM users, one line per user and mechanism."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    future = admin.client.describe_user_scram_credentials(request_timeout=settings.timeout_s)
    descriptions = admin.result(future, "list users")
    rows = sorted(
        (name, info.mechanism.name.replace("_", "-"), info.iterations)
        for name, description in descriptions.items()
        for info in description.scram_credential_infos
    )
    if json_out:
        settings.terminal.json(
            [{"user": name, "mechanism": kind, "iterations": count} for name, kind, count in rows]
        )
    else:
        settings.terminal.table(HEADERS, rows)


@app.command(no_args_is_help=True)
def delete(
    ctx: typer.Context,
    user: UserArgument,
    mechanism: Annotated[
        Mechanism | None,
        typer.Option(
            "--mechanism", "-m", help="Remove only this mechanism's credential.", show_default=False
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Delete a SCRAM user: its credentials of every mechanism, or of --mechanism."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    if mechanism is not None:
        kinds = [mechanism.scram]
    else:
        kinds = sorted(describe_user(admin, user), key=lambda kind: kind.value)
        if not kinds:
            raise CliError(f"unknown user {user!r}", ExitCode.NOT_FOUND)
    names = []
    # One request per mechanism: Kafka refuses a user named twice in one request.
    for kind in kinds:
        futures = admin.client.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, kind)], request_timeout=settings.timeout_s
        )
        try:
            _wait(admin, futures[user], "delete user", user)
        except CliError as error:
            if error.code is ExitCode.NOT_FOUND and mechanism is not None:
                message = f"user {user!r} has no {mechanism.value} credential"
                raise CliError(message, ExitCode.NOT_FOUND) from None
            raise
        names.append(kind.name.replace("_", "-"))
    settings.terminal.line(f"Deleted user {user} ({', '.join(names)}).")
