"""One connection's SASL authentication, sans-IO: which requests it lets through, the
SaslHandshake and SaslAuthenticate answers, and KIP-368 re-authentication and session expiry.

The broker's connection owns one `SaslSession` on a SASL listener and, for every request
decoded, asks `admit(api_key, now_ms)`:
- `Verdict.SERVE`: serve it as usual (ApiVersions before authentication; anything after);
- `Verdict.SASL`: a SaslHandshake or SaslAuthenticate: call `handshake(...)` or
  `authenticate(...)`, send the answer's body, and close the connection after sending it if
  the answer says `close`;
- `Verdict.CLOSE`: close the connection without answering (what Kafka does to a request that
  is not allowed before authentication, and to any request but SaslHandshake on a connection
  whose session has expired).
Once authenticated, `principal` (`User:<name>`) is who the requests come from.

The rules, as Kafka's SaslServerAuthenticator, SocketServer and KafkaApis have them:
- Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are allowed; after
  the handshake only SaslAuthenticate. (Kafka allows one successful ApiVersions, before the
  handshake; rlog answers any number of them there, which tells a client nothing new.)
- SaslHandshake names a mechanism: an enabled one is answered NONE with the enabled list, any
  other UNSUPPORTED_SASL_MECHANISM (33) with the list, and the connection is closed.
- SaslAuthenticate carries the mechanism's tokens. A failure is answered
  SASL_AUTHENTICATION_FAILED (58) with a message, and the connection is closed. The message is
  the mechanism's own when it is safe to show, else a generic one: it never says whether the
  user exists.
- Each answer that completes authentication carries `session_lifetime_ms` (v1+):
  `connections.max.reauth.ms`, or 0 when that is 0 (no expiry). The session then expires at
  `now_ms + lifetime`; a request other than SaslHandshake after that closes the connection,
  whether or not the client can re-authenticate (a client sending SaslAuthenticate v0 cannot).
- Re-authentication (KIP-368): on an authenticated connection with an expiring session, a
  SaslHandshake starts a new exchange, at most once a second. It must use the same mechanism
  (otherwise the handshake is answered but the next SaslAuthenticate fails) and end in the
  same principal (otherwise it fails: "cannot change principals"), and both failures close the
  connection. Without an expiring session, or sooner than a second after the last one, a
  SaslHandshake is answered ILLEGAL_SASL_STATE (34) and the connection stays; so is a
  SaslAuthenticate on an authenticated connection.
- A second SaslHandshake in the middle of an exchange is answered ILLEGAL_SASL_STATE and the
  connection is closed. A SaslAuthenticate before any handshake too (Kafka closes without an
  answer; the answer tells the client why).

Where rlog differs: SaslHandshake v0, which Kafka follows with raw SASL tokens that are not
Kafka requests (length-prefixed bytes without a request header), is answered
UNSUPPORTED_VERSION (35) with the mechanism list, and the connection is closed. Only clients
older than Kafka 1.0 need it: librdkafka uses SaslHandshake v1 and SaslAuthenticate whenever
the broker's ApiVersions lists SaslHandshake v1 and SaslAuthenticate (its
RD_KAFKA_FEATURE_SASL_AUTH_REQ), and kafka-python (3.x) and aiokafka (0.14) send
SaslAuthenticate when the handshake they negotiated is v1. The broker must still advertise
SaslHandshake from v0 (0-1): librdkafka enables SASL handshakes at all only when the broker's
range includes v0, and falls back to a legacy no-handshake path otherwise.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.mechanism import AuthenticationFailed, SaslMechanismServer
from rlog.core.security.plain import MECHANISM as PLAIN
from rlog.core.security.plain import PasswordCheck, PlainServer
from rlog.core.security.scram import CredentialLookup, ScramMechanism, ScramServer

Body = dict[str, Any]
MechanismFactory = Callable[[], SaslMechanismServer]

SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE = ApiKey.SASL_AUTHENTICATE

ANONYMOUS = "User:ANONYMOUS"  # the principal of a connection that did not authenticate
USER_PRINCIPAL_TYPE = "User"
# Kafka limits a request before authentication to 512 KiB (sasl.server.max.receive.size), so an
# unauthenticated client cannot make the broker buffer a large frame.
MAX_UNAUTHENTICATED_REQUEST_BYTES = 524_288
# KIP-368: a connection re-authenticates at most once a second.
MIN_REAUTH_INTERVAL_MS = 1000


class SaslState(Enum):
    EXPECT_HANDSHAKE = "expect-handshake"
    EXPECT_AUTHENTICATE = "expect-authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Verdict(Enum):
    SERVE = "serve"
    SASL = "sasl"
    CLOSE = "close"


@dataclass(frozen=True, slots=True)
class SaslAnswer:
    """A SaslHandshake or SaslAuthenticate response body, and whether to close the connection
    once it is sent. `failure` says why authentication failed (for the log and the journal:
    it may say more than the client is told)."""

    body: Body
    close: bool = False
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """`mechanisms`: the enabled mechanisms (`sasl.enabled.mechanisms`, in the order they are
    advertised), each with a factory of a fresh server for one exchange. `reauth_ms`:
    `connections.max.reauth.ms`, 0 for sessions that never expire."""

    mechanisms: Mapping[str, MechanismFactory]
    reauth_ms: int = 0

    def __post_init__(self) -> None:
        if not self.mechanisms:
            raise ValueError("no SASL mechanism is enabled")
        if self.reauth_ms < 0:
            raise ValueError("connections.max.reauth.ms must not be negative")


def standard_mechanisms(
    enabled: list[str] | tuple[str, ...],
    *,
    plain_check: PasswordCheck | None = None,
    scram_lookup: CredentialLookup | None = None,
    random_bytes: Callable[[int], bytes] | None = None,
    mock_salt_key: bytes = b"",
) -> dict[str, MechanismFactory]:
    """Factories for PLAIN and the SCRAM mechanisms named in `enabled`.

    SCRAM needs `scram_lookup`, `random_bytes` (e.g. `os.urandom`, from the daemon: core draws
    no random numbers) for the server nonces, and `mock_salt_key` (see `ScramServer`); PLAIN
    needs `plain_check`.
    """
    factories: dict[str, MechanismFactory] = {}
    for name in enabled:
        if name == PLAIN:
            if plain_check is None:
                raise ValueError("PLAIN is enabled but no password check was given")
            factories[name] = _plain_factory(plain_check)
            continue
        mechanism = ScramMechanism.from_name(name)
        if mechanism is None:
            raise ValueError(f"unsupported SASL mechanism {name!r}")
        if scram_lookup is None or random_bytes is None or not mock_salt_key:
            raise ValueError(f"{name} needs scram_lookup, random_bytes and mock_salt_key")
        factories[name] = _scram_factory(mechanism, scram_lookup, random_bytes, mock_salt_key)
    return factories


def _plain_factory(check: PasswordCheck) -> MechanismFactory:
    return lambda: PlainServer(check)


def _scram_factory(
    mechanism: ScramMechanism,
    lookup: CredentialLookup,
    random_bytes: Callable[[int], bytes],
    mock_salt_key: bytes,
) -> MechanismFactory:
    def make() -> SaslMechanismServer:
        nonce = base64.b64encode(random_bytes(18)).decode("ascii")  # printable, no commas
        return ScramServer(mechanism, lookup, server_nonce=nonce, mock_salt_key=mock_salt_key)

    return make


def handshake_body(error: ErrorCode, mechanisms: list[str] | tuple[str, ...] = ()) -> Body:
    return {"error_code": error, "mechanisms": list(mechanisms)}


def authenticate_body(
    error: ErrorCode,
    message: str | None = None,
    auth_bytes: bytes = b"",
    session_lifetime_ms: int = 0,
) -> Body:
    return {
        "error_code": error,
        "error_message": message,
        "auth_bytes": auth_bytes,
        "session_lifetime_ms": session_lifetime_ms,
    }


class SaslSession:
    """One connection's SASL state. Every method takes `now_ms`; nothing here reads a clock."""

    def __init__(self, config: SaslConfig) -> None:
        self._config = config
        self._enabled = list(config.mechanisms)
        self._state = SaslState.EXPECT_HANDSHAKE
        self._server: SaslMechanismServer | None = None
        self._mechanism: str | None = None
        self._principal: str | None = None
        self._expires_at_ms: int | None = None
        self._client_supports_reauth = False
        # Re-authentication in progress: the mechanism the handshake asked for, when it is not
        # the session's (the next SaslAuthenticate then fails, as Kafka's REAUTH_BAD_MECHANISM).
        self._reauthenticating = False
        self._bad_reauth_mechanism: str | None = None
        self._last_reauth_start_ms: int | None = None

    @property
    def state(self) -> SaslState:
        return self._state

    @property
    def principal(self) -> str | None:
        """`User:<name>` once authenticated (kept during a re-authentication), else None."""
        return self._principal

    @property
    def mechanism(self) -> str | None:
        return self._mechanism

    @property
    def authenticated(self) -> bool:
        return self._principal is not None and self._state is not SaslState.FAILED

    @property
    def reauthenticating(self) -> bool:
        return self._reauthenticating

    @property
    def session_expires_at_ms(self) -> int | None:
        """When the session ends (KIP-368), or None if it never does."""
        return self._expires_at_ms

    @property
    def client_supports_reauthentication(self) -> bool:
        """Whether the client sent SaslAuthenticate v1+, so knows of session lifetimes."""
        return self._client_supports_reauth

    def session_expired(self, now_ms: int) -> bool:
        return self._expires_at_ms is not None and now_ms > self._expires_at_ms

    def admit(self, api_key: int, now_ms: int) -> Verdict:
        """What to do with a request that just arrived on this connection."""
        is_sasl = api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
        state = self._state
        if state is SaslState.FAILED:
            return Verdict.CLOSE
        if state is SaslState.AUTHENTICATED:
            # As Kafka's SocketServer: a handshake that may begin a re-authentication goes
            # through even on an expired session; anything else on one closes the connection.
            if api_key == SASL_HANDSHAKE and self._may_reauthenticate(now_ms):
                return Verdict.SASL
            if self.session_expired(now_ms):
                return Verdict.CLOSE
            return Verdict.SASL if is_sasl else Verdict.SERVE
        if is_sasl:
            return Verdict.SASL
        if state is SaslState.EXPECT_HANDSHAKE and api_key == ApiKey.API_VERSIONS:
            return Verdict.SERVE
        return Verdict.CLOSE

    def handshake(self, version: int, body: Body, now_ms: int) -> SaslAnswer:
        """Answer a SaslHandshake (after `admit` said SASL)."""
        mechanism: str = body.get("mechanism") or ""
        if self._state is SaslState.AUTHENTICATED:
            if not self._may_reauthenticate(now_ms):
                # KafkaApis answers a handshake on an authenticated connection this way.
                return SaslAnswer(handshake_body(ErrorCode.ILLEGAL_SASL_STATE))
            self._last_reauth_start_ms = now_ms
            self._reauthenticating = True
        elif self._state is not SaslState.EXPECT_HANDSHAKE:
            return self._fail_handshake(
                ErrorCode.ILLEGAL_SASL_STATE, (), "SaslHandshake in the middle of an exchange"
            )
        if version < 1:
            return self._fail_handshake(
                ErrorCode.UNSUPPORTED_VERSION,
                self._enabled,
                "SaslHandshake v0 (raw SASL tokens) is not supported",
            )
        if mechanism not in self._config.mechanisms:
            return self._fail_handshake(
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                self._enabled,
                f"unsupported SASL mechanism {mechanism!r}",
            )
        if self._reauthenticating and mechanism != self._mechanism:
            self._bad_reauth_mechanism = mechanism
        else:
            self._server = self._config.mechanisms[mechanism]()
            self._mechanism = mechanism
        self._state = SaslState.EXPECT_AUTHENTICATE
        return SaslAnswer(handshake_body(ErrorCode.NONE, self._enabled))

    def authenticate(self, version: int, body: Body, now_ms: int) -> SaslAnswer:
        """Answer a SaslAuthenticate (after `admit` said SASL)."""
        if self._state is SaslState.AUTHENTICATED:
            return SaslAnswer(
                authenticate_body(
                    ErrorCode.ILLEGAL_SASL_STATE,
                    "SaslAuthenticate request received after successful authentication",
                )
            )
        if self._state is not SaslState.EXPECT_AUTHENTICATE:
            return self._fail_authenticate(
                ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate before SaslHandshake",
                "SaslAuthenticate before SaslHandshake",
            )
        if version > 0:
            self._client_supports_reauth = True
        if self._bad_reauth_mechanism is not None:
            message = (
                f"SASL mechanism {self._bad_reauth_mechanism!r} cannot re-authenticate a "
                f"session authenticated with {self._mechanism!r}"
            )
            return self._fail_authenticate(ErrorCode.SASL_AUTHENTICATION_FAILED, message, message)
        assert self._server is not None
        try:
            challenge = self._server.evaluate(bytes(body.get("auth_bytes") or b""))
        except AuthenticationFailed as failed:
            step = "re-authentication" if self._reauthenticating else "authentication"
            message = failed.client_message or (
                f"Authentication failed during {step} due to invalid credentials with SASL "
                f"mechanism {self._mechanism}"
            )
            return self._fail_authenticate(
                ErrorCode.SASL_AUTHENTICATION_FAILED, message, failed.reason
            )
        if not self._server.complete:
            return SaslAnswer(authenticate_body(ErrorCode.NONE, None, challenge))
        principal = f"{USER_PRINCIPAL_TYPE}:{self._server.authorization_id}"
        if self._reauthenticating and principal != self._principal:
            message = f"Cannot change principals during re-authentication from {self._principal}"
            return self._fail_authenticate(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"{message}: {principal}",
                f"{message} to {principal}",
            )
        lifetime = self._config.reauth_ms
        self._expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        self._principal = principal
        self._server = None
        self._reauthenticating = False
        self._state = SaslState.AUTHENTICATED
        return SaslAnswer(authenticate_body(ErrorCode.NONE, None, challenge, lifetime))

    def _may_reauthenticate(self, now_ms: int) -> bool:
        if self._expires_at_ms is None:
            return False  # re-authentication is off without a session lifetime
        last = self._last_reauth_start_ms
        return last is None or now_ms - last >= MIN_REAUTH_INTERVAL_MS

    def _fail_handshake(
        self, error: ErrorCode, mechanisms: list[str] | tuple[str, ...], reason: str
    ) -> SaslAnswer:
        self._state = SaslState.FAILED
        self._server = None
        return SaslAnswer(handshake_body(error, mechanisms), close=True, failure=reason)

    def _fail_authenticate(self, error: ErrorCode, message: str, reason: str) -> SaslAnswer:
        self._state = SaslState.FAILED
        self._server = None
        return SaslAnswer(authenticate_body(error, message), close=True, failure=reason)
