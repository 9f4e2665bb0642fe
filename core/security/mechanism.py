"""What every SASL mechanism's server side offers the connection's state machine (sasl.py).

A mechanism server lives for one authentication: the connection makes a fresh one at each
SaslHandshake (so at each re-authentication too), feeds it the client's tokens in order and
sends back what it returns, until it says `complete`. A failure raises `AuthenticationFailed`,
after which the server is dead and the connection is closed.
"""

from __future__ import annotations

from typing import Protocol


class AuthenticationFailed(Exception):
    """The client did not authenticate.

    `reason` is for the broker's log and journal only: it may say that a user does not exist,
    which a client must not learn. `client_message`, when set, is safe to send to the client;
    when None the connection sends a generic message (as Kafka does for SaslException).
    """

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.client_message = client_message


class SaslMechanismServer(Protocol):
    """The server side of one SASL exchange (Java's `SaslServer`, without I/O)."""

    @property
    def mechanism_name(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the client has authenticated: the last `evaluate` was the final step."""
        ...

    @property
    def authorization_id(self) -> str | None:
        """The user name the session acts as, once complete (None before)."""
        ...

    def evaluate(self, response: bytes) -> bytes:
        """Take the client's next token, return the challenge to send (may be empty).

        Raises `AuthenticationFailed`; calling it again after that, or after completion, is
        also a failure.
        """
        ...
