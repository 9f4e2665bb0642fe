"""One connection's SASL state machine (core/security/sasl.py): which requests pass before
authentication, SaslHandshake and SaslAuthenticate answers, failures that close the connection,
KIP-368 session lifetimes, expiry and re-authentication."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import scramp

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.codec import Codec, codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.plain import password_table
from rlog.core.security.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslAnswer,
    SaslConfig,
    SaslSession,
    SaslState,
    Verdict,
    standard_mechanisms,
)
from rlog.core.security.scram import ScramCredential, ScramMechanism, new_credential

Body = dict[str, Any]
T0 = 1_000_000
REAUTH_MS = 60_000
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
SCRAM = {
    name: new_credential(ScramMechanism.SCRAM_SHA_256, pw, b"salt-" + name.encode() * 4)
    for name, pw in PASSWORDS.items()
}


def counting_bytes() -> Any:
    counter = itertools.count()
    return lambda n: bytes((next(counter) + i) % 256 for i in range(n))


def lookup(name: str, mechanism: ScramMechanism) -> ScramCredential | None:
    credential = SCRAM.get(name)
    return credential if credential and credential.mechanism is mechanism else None


def session(reauth_ms: int = 0) -> SaslSession:
    mechanisms = standard_mechanisms(
        ["SCRAM-SHA-256", "PLAIN"],
        plain_check=password_table(PASSWORDS),
        scram_lookup=lookup,
        random_bytes=counting_bytes(),
        mock_salt_key=b"secret",
    )
    return SaslSession(SaslConfig(mechanisms, reauth_ms=reauth_ms))


def handshake(s: SaslSession, mechanism: str, now_ms: int = T0, version: int = 1) -> SaslAnswer:
    assert s.admit(SASL_HANDSHAKE, now_ms) is Verdict.SASL
    return s.handshake(version, {"mechanism": mechanism}, now_ms)


def authenticate(s: SaslSession, token: bytes, now_ms: int = T0, version: int = 2) -> SaslAnswer:
    assert s.admit(SASL_AUTHENTICATE, now_ms) is Verdict.SASL
    return s.authenticate(version, {"auth_bytes": token}, now_ms)


def plain_login(
    s: SaslSession, user: str = "alice", password: str | None = None, now_ms: int = T0
) -> SaslAnswer:
    assert handshake(s, "PLAIN", now_ms).body["error_code"] == ErrorCode.NONE
    token = f"\0{user}\0{PASSWORDS.get(user, 'x') if password is None else password}"
    return authenticate(s, token.encode(), now_ms)


def scram_login(s: SaslSession, user: str, password: str, now_ms: int = T0) -> list[SaslAnswer]:
    assert handshake(s, "SCRAM-SHA-256", now_ms).body["error_code"] == ErrorCode.NONE
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    first = authenticate(s, client.get_client_first().encode(), now_ms)
    if first.body["error_code"] != ErrorCode.NONE:
        return [first]
    client.set_server_first(first.body["auth_bytes"].decode())
    final = authenticate(s, client.get_client_final().encode(), now_ms)
    if final.body["error_code"] == ErrorCode.NONE:
        client.set_server_final(final.body["auth_bytes"].decode())  # checks the server's proof
    return [first, final]


def codec(name: str, version: int) -> Codec:
    return codec_for(name, version)


def test_only_api_versions_and_sasl_pass_before_authentication() -> None:
    s = session()
    assert s.admit(ApiKey.API_VERSIONS, T0) is Verdict.SERVE
    assert s.admit(ApiKey.API_VERSIONS, T0) is Verdict.SERVE
    for key in (ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.FIND_COORDINATOR):
        assert s.admit(key, T0) is Verdict.CLOSE
    assert s.principal is None and not s.authenticated


def test_plain_login() -> None:
    s = session()
    answer = handshake(s, "PLAIN")
    assert answer == SaslAnswer({"error_code": 0, "mechanisms": ["SCRAM-SHA-256", "PLAIN"]})
    assert s.admit(ApiKey.METADATA, T0) is Verdict.CLOSE  # after the handshake: only SASL
    assert s.admit(ApiKey.API_VERSIONS, T0) is Verdict.CLOSE
    answer = authenticate(s, b"\0alice\0alice-pw")
    assert answer.body == {
        "error_code": 0,
        "error_message": None,
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }
    assert not answer.close
    assert s.state is SaslState.AUTHENTICATED and s.authenticated
    assert s.principal == "User:alice"
    assert s.mechanism == "PLAIN"
    assert s.session_expires_at_ms is None
    assert s.admit(ApiKey.PRODUCE, T0 + 10**9) is Verdict.SERVE  # never expires


def test_scram_login_with_an_independent_client() -> None:
    s = session()
    first, final = scram_login(s, "bob", "bob-pw")
    assert first.body["auth_bytes"].startswith(b"r=") and not first.close
    assert final.body["auth_bytes"].startswith(b"v=")
    assert s.principal == "User:bob"


def test_wrong_password_fails_and_closes_with_a_generic_message() -> None:
    s = session()
    *_, final = scram_login(s, "alice", "wrong")
    assert final.close
    assert final.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert final.body["error_message"] == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    assert final.failure == "client-final: invalid proof"  # for the broker's log only
    assert s.state is SaslState.FAILED and not s.authenticated
    assert s.admit(ApiKey.API_VERSIONS, T0) is Verdict.CLOSE


def test_unknown_user_answers_like_a_wrong_password() -> None:
    wrong = scram_login(session(), "alice", "wrong")
    unknown = scram_login(session(), "mallory", "wrong")
    assert [a.body["error_code"] for a in wrong] == [a.body["error_code"] for a in unknown]
    assert wrong[1].body == unknown[1].body
    assert wrong[1].close and unknown[1].close


def test_plain_failures_say_why_when_it_is_safe() -> None:
    answer = plain_login(session(), "alice", "wrong")
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.body["error_message"] == "Authentication failed: invalid username or password"


def test_unsupported_mechanism_is_refused_with_the_list_and_closes() -> None:
    s = session()
    answer = handshake(s, "GSSAPI")
    assert answer.close
    assert answer.body == {
        "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "mechanisms": ["SCRAM-SHA-256", "PLAIN"],
    }
    assert s.state is SaslState.FAILED


def test_handshake_v0_raw_tokens_are_not_supported() -> None:
    s = session()
    answer = handshake(s, "PLAIN", version=0)
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert answer.body["mechanisms"] == ["SCRAM-SHA-256", "PLAIN"]


def test_a_second_handshake_mid_exchange_is_illegal_and_closes() -> None:
    s = session()
    handshake(s, "PLAIN")
    answer = handshake(s, "PLAIN")
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE


def test_authenticate_before_handshake_is_illegal_and_closes() -> None:
    s = session()
    answer = authenticate(s, b"\0alice\0alice-pw")
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert s.state is SaslState.FAILED


def test_authenticate_after_authentication_is_illegal_but_keeps_the_connection() -> None:
    s = session()
    plain_login(s)
    answer = authenticate(s, b"\0alice\0alice-pw")
    assert not answer.close
    assert answer.body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert s.principal == "User:alice"
    assert s.admit(ApiKey.PRODUCE, T0) is Verdict.SERVE


def test_handshake_after_authentication_without_session_lifetime_is_illegal() -> None:
    s = session(reauth_ms=0)
    plain_login(s)
    answer = handshake(s, "PLAIN", T0 + 5000)
    assert answer == SaslAnswer({"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})
    assert s.state is SaslState.AUTHENTICATED
    assert s.admit(ApiKey.PRODUCE, T0 + 5000) is Verdict.SERVE


def test_session_lifetime_and_expiry() -> None:
    s = session(reauth_ms=REAUTH_MS)
    answer = plain_login(s)
    assert answer.body["session_lifetime_ms"] == REAUTH_MS
    assert s.session_expires_at_ms == T0 + REAUTH_MS
    assert s.admit(ApiKey.PRODUCE, T0 + REAUTH_MS) is Verdict.SERVE
    assert not s.session_expired(T0 + REAUTH_MS)
    assert s.session_expired(T0 + REAUTH_MS + 1)
    # KIP-368: a connection that did not re-authenticate is closed on its next request.
    assert s.admit(ApiKey.PRODUCE, T0 + REAUTH_MS + 1) is Verdict.CLOSE
    assert s.admit(ApiKey.API_VERSIONS, T0 + REAUTH_MS + 1) is Verdict.CLOSE
    assert s.admit(SASL_AUTHENTICATE, T0 + REAUTH_MS + 1) is Verdict.CLOSE
    # ... but a SaslHandshake may still start the re-authentication.
    assert s.admit(SASL_HANDSHAKE, T0 + REAUTH_MS + 1) is Verdict.SASL


def test_reauthentication_keeps_the_principal_and_renews_the_session() -> None:
    s = session(reauth_ms=REAUTH_MS)
    scram_login(s, "alice", "alice-pw")
    later = T0 + REAUTH_MS - 1000
    _, final = scram_login(s, "alice", "alice-pw", later)
    assert final.body["session_lifetime_ms"] == REAUTH_MS and not final.close
    assert s.principal == "User:alice"
    assert s.session_expires_at_ms == later + REAUTH_MS
    assert not s.reauthenticating
    assert s.admit(ApiKey.PRODUCE, T0 + REAUTH_MS + 1) is Verdict.SERVE


def test_reauthentication_as_another_user_is_refused() -> None:
    s = session(reauth_ms=REAUTH_MS)
    plain_login(s, "alice")
    answer = plain_login(s, "bob", now_ms=T0 + 2000)
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in answer.body["error_message"]
    assert "User:alice" in answer.body["error_message"]
    assert s.state is SaslState.FAILED
    assert s.admit(ApiKey.PRODUCE, T0 + 2000) is Verdict.CLOSE


def test_reauthentication_with_another_mechanism_fails_at_authenticate() -> None:
    s = session(reauth_ms=REAUTH_MS)
    plain_login(s, "alice")
    assert handshake(s, "SCRAM-SHA-256", T0 + 2000).body["error_code"] == ErrorCode.NONE
    answer = authenticate(s, b"n,,n=alice,r=abc", T0 + 2000)
    assert answer.close
    assert answer.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "re-authenticate" in answer.body["error_message"]


def test_reauthentication_at_most_once_a_second() -> None:
    s = session(reauth_ms=REAUTH_MS)
    plain_login(s)
    plain_login(s, now_ms=T0 + 10)  # the first re-authentication may come at once
    answer = handshake(s, "PLAIN", T0 + 500)
    assert answer.body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and not answer.close
    assert plain_login(s, now_ms=T0 + 1010).body["error_code"] == ErrorCode.NONE


def test_requests_during_reauthentication_close_the_connection() -> None:
    s = session(reauth_ms=REAUTH_MS)
    plain_login(s)
    handshake(s, "PLAIN", T0 + 2000)
    assert s.reauthenticating
    assert s.principal == "User:alice"  # still who the connection is
    assert s.admit(ApiKey.PRODUCE, T0 + 2000) is Verdict.CLOSE


def test_failed_reauthentication_message_says_re_authentication() -> None:
    s = session(reauth_ms=REAUTH_MS)
    scram_login(s, "alice", "alice-pw")
    *_, final = scram_login(s, "alice", "wrong", T0 + 2000)
    assert final.close
    assert "during re-authentication" in final.body["error_message"]


def test_clients_sending_authenticate_v0_do_not_support_reauthentication() -> None:
    s = session(reauth_ms=REAUTH_MS)
    handshake(s, "PLAIN")
    answer = authenticate(s, b"\0alice\0alice-pw", version=0)
    assert answer.body["error_code"] == ErrorCode.NONE
    assert not s.client_supports_reauthentication
    assert s.session_expires_at_ms == T0 + REAUTH_MS  # their connection still expires
    s2 = session(reauth_ms=REAUTH_MS)
    plain_login(s2)
    assert s2.client_supports_reauthentication


def test_answers_encode_with_the_schemas() -> None:
    s = session(reauth_ms=REAUTH_MS)
    handshake_answer = handshake(s, "SCRAM-SHA-256")
    for version in (0, 1):
        codec("SaslHandshakeResponse", version).encode(handshake_answer.body)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    first = authenticate(s, client.get_client_first().encode())
    client.set_server_first(first.body["auth_bytes"].decode())
    final = authenticate(s, client.get_client_final().encode())
    for answer in (first, final):
        for version in (0, 1, 2):
            encoded = codec("SaslAuthenticateResponse", version).encode(answer.body)
            decoded, _ = codec("SaslAuthenticateResponse", version).decode(encoded)
            assert decoded["auth_bytes"] == answer.body["auth_bytes"]
            if version >= 1:
                assert decoded["session_lifetime_ms"] == answer.body["session_lifetime_ms"]
    failure = authenticate(session(), b"x")
    codec("SaslAuthenticateResponse", 2).encode(failure.body)


def test_scram_nonces_come_from_the_given_random_source() -> None:
    answers = [scram_login(session(), "alice", "alice-pw")[0] for _ in range(2)]
    nonces = [a.body["auth_bytes"].split(b",")[0] for a in answers]
    assert len(nonces[0]) > 20
    assert nonces[0] != nonces[1]  # different clients' nonces; our part is the same here:
    assert nonces[0][-24:] == nonces[1][-24:]  # deterministic for tests, random in the daemon


def test_configuration_errors() -> None:
    with pytest.raises(ValueError):
        SaslConfig({})
    with pytest.raises(ValueError):
        SaslConfig(standard_mechanisms(["PLAIN"], plain_check=lambda *_: True), reauth_ms=-1)
    with pytest.raises(ValueError):
        standard_mechanisms(["PLAIN"])
    with pytest.raises(ValueError):
        standard_mechanisms(["SCRAM-SHA-512"], scram_lookup=lookup)
    with pytest.raises(ValueError):
        standard_mechanisms(["GSSAPI"])
