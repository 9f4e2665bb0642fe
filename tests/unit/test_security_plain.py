"""SASL/PLAIN server side (core/security/plain.py): RFC 4616's message with Kafka's rules, and
the password table check."""

from __future__ import annotations

import pytest

from rlog.core.security.mechanism import AuthenticationFailed
from rlog.core.security.plain import PlainServer, password_table

USERS = password_table({"alice": "alice-secret", "bob": "pässwörd"})


def authenticate(message: bytes) -> PlainServer:
    server = PlainServer(USERS)
    assert server.evaluate(message) == b""
    return server


def refusal(message: bytes) -> AuthenticationFailed:
    server = PlainServer(USERS)
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(message)
    assert not server.complete and server.authorization_id is None
    return failed.value


def test_right_password_authenticates() -> None:
    server = authenticate(b"\0alice\0alice-secret")
    assert server.complete
    assert server.authorization_id == "alice"
    assert authenticate("\0bob\0pässwörd".encode()).authorization_id == "bob"


def test_authzid_equal_to_the_username_is_accepted() -> None:
    assert authenticate(b"alice\0alice\0alice-secret").authorization_id == "alice"


def test_authzid_of_another_user_is_refused() -> None:
    failure = refusal(b"bob\0alice\0alice-secret")
    assert failure.client_message is not None
    assert "authorization id" in failure.client_message


def test_wrong_password_and_unknown_user_read_the_same_to_the_client() -> None:
    wrong = refusal(b"\0alice\0nope")
    unknown = refusal(b"\0mallory\0nope")
    assert wrong.client_message == unknown.client_message
    assert wrong.client_message is not None
    # The password is checked before the authzid, so a probe learns nothing from the authzid.
    assert refusal(b"bob\0alice\0nope").client_message == wrong.client_message


@pytest.mark.parametrize(
    "message",
    [
        b"alice\0alice-secret",  # two fields
        b"\0alice\0alice-secret\0",  # four
        b"",
        b"\0\0alice-secret",  # no username
        b"\0alice\0",  # no password
        b"\0alice\0\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_messages_are_refused_with_a_reason(message: bytes) -> None:
    assert refusal(message).client_message


def test_plain_takes_one_message() -> None:
    server = authenticate(b"\0alice\0alice-secret")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"\0alice\0alice-secret")
    server = PlainServer(USERS)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"\0alice\0nope")
    with pytest.raises(AuthenticationFailed):  # no second try on the same exchange
        server.evaluate(b"\0alice\0alice-secret")


def test_password_table_compares_whole_passwords() -> None:
    assert USERS("alice", "alice-secret")
    for password in ("alice-secre", "alice-secret!", "", "ALICE-SECRET"):
        assert not USERS("alice", password)
    assert not USERS("mallory", "")
    assert not USERS("mallory", "\0" * 32)  # the dummy an unknown user is compared with
