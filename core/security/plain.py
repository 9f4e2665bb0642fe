"""SASL/PLAIN (RFC 4616), the server side, as Kafka's PlainSaslServer.

The client sends one message, `[authzid] NUL authcid NUL passwd` in UTF-8, and the server
answers with nothing or fails. Kafka's rules, followed here:
- exactly three fields; the username and the password must not be empty;
- the password is checked first, by the caller's `PasswordCheck`;
- the authzid must then be empty or equal to the username: the session never acts as another.
Every failure message is safe to show the client (Kafka sends them too): none says whether the
user exists.

Kafka's brokers check PLAIN passwords against a table in their JAAS config
(`user_NAME="password"` entries, PlainServerCallbackHandler); `password_table` is that check,
in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from rlog.core.security.mechanism import AuthenticationFailed
from rlog.core.security.scram import CredentialLookup, ScramMechanism, new_credential

MECHANISM = "PLAIN"

# (username, password) -> whether they match. Must not raise for an unknown user.
PasswordCheck = Callable[[str, str], bool]


def password_table(users: Mapping[str, str]) -> PasswordCheck:
    """A `PasswordCheck` against a fixed {username: password} table.

    The comparison takes the same time whatever the password's bytes, and an unknown user is
    compared against a dummy, so the time taken says little about which users exist.
    """
    table = {name: password.encode() for name, password in users.items()}
    dummy = b"\0" * 32

    def check(username: str, password: str) -> bool:
        expected = table.get(username)
        matches = hmac.compare_digest(password.encode(), dummy if expected is None else expected)
        return expected is not None and matches

    return check


class PlainServer:
    """The server side of one SASL/PLAIN exchange. Implements `SaslMechanismServer`."""

    def __init__(self, check: PasswordCheck) -> None:
        self._check = check
        self._username: str | None = None
        self._done = False

    @property
    def mechanism_name(self) -> str:
        return MECHANISM

    @property
    def complete(self) -> bool:
        return self._username is not None

    @property
    def authorization_id(self) -> str | None:
        return self._username

    def evaluate(self, response: bytes) -> bytes:
        if self._done:
            raise AuthenticationFailed("PLAIN takes a single message")
        self._done = True
        try:
            text = bytes(response).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed(
                "PLAIN message is not UTF-8", "Invalid SASL/PLAIN message: not UTF-8"
            ) from exc
        fields = text.split("\0")
        if len(fields) != 3:
            message = f"Invalid SASL/PLAIN message: expected 3 fields, got {len(fields)}"
            raise AuthenticationFailed(message, message)
        authzid, username, password = fields
        if not username:
            raise AuthenticationFailed("no username", "Authentication failed: no username given")
        if not password:
            raise AuthenticationFailed("no password", "Authentication failed: no password given")
        if not self._check(username, password):
            raise AuthenticationFailed(
                f"wrong password or unknown user {username!r}",
                "Authentication failed: invalid username or password",
            )
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "authzid differs from username",
                "Authentication failed: the authorization id requested differs from the username",
            )
        self._username = username
        return b""


def scram_password_check(lookup: CredentialLookup) -> PasswordCheck:
    """A `PasswordCheck` against the users' SCRAM credentials, as Redpanda checks PLAIN: one
    user store (AlterUserScramCredentials, `rlog user`) serves both mechanisms. The password is
    salted as the stored credential was (its salt and iterations, SHA-512's first) and the
    resulting stored key compared in constant time; a user without a credential fails."""

    def check(username: str, password: str) -> bool:
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            stored = lookup(username, mechanism)
            if stored is None:
                continue
            derived = new_credential(mechanism, password, stored.salt, stored.iterations)
            return hmac.compare_digest(derived.stored_key, stored.stored_key)
        return False

    return check
