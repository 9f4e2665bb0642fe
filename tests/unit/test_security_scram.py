"""SCRAM-SHA-256/512 server side (core/security/scram.py): RFC 7677's example exchange, an
independent client (scramp) for both mechanisms, refusals (wrong password, unknown user, nonce,
channel binding, malformed messages), username escaping and the AlterUserScramCredentials
checks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.mechanism import AuthenticationFailed
from rlog.core.security.scram import (
    DEFAULT_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    escape_username,
    new_credential,
    salted_password,
    unescape_username,
    validate_upsertion,
    validate_user_and_mechanism,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
MOCK_KEY = b"cluster-secret-for-unknown-users"
SALT = b"0123456789abcdef"

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def server_for(
    users: dict[str, ScramCredential],
    mechanism: ScramMechanism = SHA256,
    nonce: str = "server-nonce",
) -> ScramServer:
    def lookup(name: str, wanted: ScramMechanism) -> ScramCredential | None:
        credential = users.get(name)
        return credential if credential is not None and credential.mechanism is wanted else None

    return ScramServer(mechanism, lookup, server_nonce=nonce, mock_salt_key=MOCK_KEY)


def rfc_server() -> ScramServer:
    credential = new_credential(SHA256, "pencil", RFC_SALT, 4096)
    return server_for({"user": credential}, nonce=RFC_SERVER_NONCE)


def test_rfc7677_example_exchange() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete and server.authorization_id is None
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.authorization_id == "user"


def test_a_message_after_completion_fails() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FINAL)


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("username", ["alice", "a,b=c", "zoë"])
def test_scramp_client_authenticates(mechanism: ScramMechanism, username: str) -> None:
    credential = new_credential(mechanism, "s3cret pässword", SALT, 8192)
    server = server_for({username: credential}, mechanism)
    client = scramp.ScramClient([mechanism.mechanism_name], username, "s3cret pässword")
    client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
    # set_server_final raises if the server's signature is wrong: the client checks us too.
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    assert server.complete
    assert server.authorization_id == username


def scramp_exchange(
    server: ScramServer, username: str, password: str, mechanism: ScramMechanism = SHA256
) -> tuple[str, str]:
    """Run client-first; return (server-first, client-final) for the test to send."""
    client = scramp.ScramClient([mechanism.mechanism_name], username, password)
    server_first = server.evaluate(client.get_client_first().encode()).decode()
    client.set_server_first(server_first)
    return server_first, client.get_client_final()


def test_wrong_password_is_refused_at_the_proof_with_no_client_message() -> None:
    server = server_for({"alice": new_credential(SHA256, "right", SALT)})
    _, final = scramp_exchange(server, "alice", "wrong")
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(final.encode())
    assert failed.value.client_message is None  # the connection says something generic
    assert not server.complete
    with pytest.raises(AuthenticationFailed):  # and the exchange is over
        server.evaluate(final.encode())


def test_unknown_user_looks_like_a_known_one_until_the_proof() -> None:
    # alice's salt is shaped as Kafka's tools make them, like the mock salts.
    kafka_like_salt = b"4m0xk1vq8a2h9c7t3s5e6n1p0r"
    users = {"alice": new_credential(SHA256, "right", kafka_like_salt, DEFAULT_ITERATIONS)}
    seen = []
    for name in ("alice", "mallory"):
        server = server_for(users)
        server_first, final = scramp_exchange(server, name, "wrong")
        nonce, salt, iterations = (part[2:] for part in server_first.split(","))
        with pytest.raises(AuthenticationFailed) as failed:
            server.evaluate(final.encode())
        # A 130-bit number in base 36 has 25 or 26 digits, rarely fewer.
        salt_shape = re.fullmatch(rb"[0-9a-z]{20,26}", base64.b64decode(salt)) is not None
        seen.append((salt_shape, iterations, nonce.endswith("server-nonce"), failed.value))
    assert [s[:3] for s in seen] == [(True, "4096", True)] * 2
    assert [failure.client_message for *_, failure in seen] == [None, None]


def test_unknown_user_gets_the_same_salt_every_time_and_users_differ() -> None:
    def salt_of(name: str, key: bytes = MOCK_KEY) -> bytes:
        server = ScramServer(SHA256, lambda *_: None, server_nonce="n", mock_salt_key=key)
        first = server.evaluate(f"n,,n={name},r=abc".encode()).decode()
        return base64.b64decode(first.split(",")[1][2:])

    assert salt_of("mallory") == salt_of("mallory")
    assert salt_of("mallory") != salt_of("eve")
    assert salt_of("mallory") != salt_of("mallory", b"another key")
    # Shaped like the salts Kafka's tools make: a 130-bit number in base 36, as ASCII.
    assert re.fullmatch(rb"[0-9a-z]{20,26}", salt_of("mallory"))


def test_unknown_user_with_the_right_looking_proof_still_fails() -> None:
    # Even a client that guesses the mock salt and uses it cannot pass: the keys are secret.
    server = ScramServer(SHA256, lambda *_: None, server_nonce="n", mock_salt_key=MOCK_KEY)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "ghost", "any")
    client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(client.get_client_final().encode())
    assert failed.value.reason == "client-final: unknown user"


def test_a_credential_of_the_other_mechanism_counts_as_unknown() -> None:
    server = ScramServer(
        SHA512,
        lambda *_: new_credential(SHA256, "pw", SALT),
        server_nonce="n",
        mock_salt_key=MOCK_KEY,
    )
    _, final = scramp_exchange(server, "alice", "pw", SHA512)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final.encode())


def replace_attribute(message: str, key: str, value: str) -> str:
    return ",".join(
        f"{key}={value}" if part.startswith(f"{key}=") else part for part in message.split(",")
    )


def test_nonce_mismatch_is_refused() -> None:
    def refusal(change: Callable[[str], str]) -> str:
        """The failure of an exchange whose final nonce is `change`d from the combined one."""
        server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
        server_first, final = scramp_exchange(server, "alice", "pw")
        combined = server_first.split(",")[0][2:]
        with pytest.raises(AuthenticationFailed) as failed:
            server.evaluate(replace_attribute(final, "r", change(combined)).encode())
        return failed.value.reason

    assert refusal(lambda nonce: nonce + "x") == "client-final: nonce mismatch"
    assert refusal(lambda nonce: nonce[:-1]) == "client-final: nonce mismatch"
    # Ending with the combined nonce passes that check (Kafka's rule), and fails at the proof,
    # which was made over the message with the nonce the client had.
    assert "proof" in refusal(lambda nonce: "x" + nonce)


def test_an_old_librdkafka_final_nonce_is_accepted() -> None:
    """librdkafka before 2.6.1 (Debian 12's kcat) sends r=<its nonce><combined nonce>; Kafka
    checks only that the nonce ends with the combined one, and so does rlog."""
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    client_first_bare = "n=alice,r=clientnonce"
    server_first = server.evaluate(f"n,,{client_first_bare}".encode()).decode()
    combined, salt, iterations = (part[2:] for part in server_first.split(","))
    without_proof = f"c=biws,r=clientnonce{combined}"
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    server.evaluate(f"{without_proof},p={proof.decode()}".encode())
    assert server.complete


def test_channel_binding_must_be_the_gs2_header() -> None:
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    _, final = scramp_exchange(server, "alice", "pw")
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        server.evaluate(replace_attribute(final, "c", "eSws").encode())  # "y,,"


@pytest.mark.parametrize(
    "proof", ["AAAA", "not base64!", "", base64.b64encode(b"\0" * 32).decode()]
)
def test_bad_proofs_are_refused(proof: str) -> None:
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    _, final = scramp_exchange(server, "alice", "pw")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(replace_attribute(final, "p", proof).encode())


@pytest.mark.parametrize(
    "client_first",
    [
        b"y,,n=alice,r=abc",  # channel binding flags other than "n" (as Kafka)
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,r=abc,n=alice",
        b"n,,n=alice",
        b"n,,n=alice,r=",
        b"n,,n=al=2Bice,r=abc",  # "=" must start =2C or =3D
        b"n,,n=,r=abc",
        b"n,,m=ext,n=alice,r=abc",  # a mandatory extension we do not know
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens: not supported
        b"n,,n=alice,r=ab c",
        b"n,x=1,n=alice,r=abc",
        b"n,,n=alice,r=abc,bad",
        b"n,,n=\xff,r=abc",
    ],
)
def test_malformed_or_unsupported_client_first_is_refused(client_first: bytes) -> None:
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    with pytest.raises(AuthenticationFailed):
        server.evaluate(client_first)


def test_unknown_extensions_are_ignored_and_tokenauth_false_too() -> None:
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    assert server.evaluate(b"n,,n=alice,r=abc,tokenauth=false,foo=bar").startswith(b"r=abc")


def test_authzid_must_be_the_username() -> None:
    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")

    server = server_for({"alice": new_credential(SHA256, "pw", SALT)})
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(b"n,a=bob,n=alice,r=abc")
    assert failed.value.client_message is not None  # safe to say, and says why


def test_authzid_exchange_completes_with_the_matching_channel_binding() -> None:
    credential = new_credential(SHA256, "pencil", RFC_SALT, 4096)
    server = server_for({"user": credential}, nonce=RFC_SERVER_NONCE)
    client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(b"n,a=user," + client_first_bare.encode()).decode()
    salted = salted_password(SHA256, "pencil", RFC_SALT, 4096)
    without_proof = "c=" + base64.b64encode(b"n,a=user,").decode() + ",r=" + server_first[2:]
    without_proof = without_proof.split(",s=")[0]
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = SHA256.hmac(salted, b"Client Key")
    signature = SHA256.hmac(SHA256.hash(client_key), auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}"
    server.evaluate(final.encode())
    assert server.authorization_id == "user"


def test_stored_credentials_with_too_few_iterations_are_refused() -> None:
    weak = new_credential(SHA256, "pw", SALT, 1000)
    with pytest.raises(AuthenticationFailed):
        server_for({"alice": weak}).evaluate(b"n,,n=alice,r=abc")


def test_server_nonce_must_be_printable_without_commas() -> None:
    for nonce in ("", "a,b", "a b", "é"):
        with pytest.raises(ValueError):
            ScramServer(SHA256, lambda *_: None, server_nonce=nonce, mock_salt_key=MOCK_KEY)


@given(st.text())
def test_username_escaping_round_trips(name: str) -> None:
    escaped = escape_username(name)
    assert "," not in escaped
    assert re.fullmatch(r"([^=]|=2C|=3D)*", escaped, re.DOTALL)
    assert unescape_username(escaped) == name


@pytest.mark.parametrize("saslname", ["a=", "a=2", "a=2c", "=3d", "a==3D"])
def test_bad_escapes_are_rejected(saslname: str) -> None:
    with pytest.raises(ValueError):
        unescape_username(saslname)


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_credential_from_a_clients_salted_password_matches_one_from_the_password(
    mechanism: ScramMechanism,
) -> None:
    # AlterUserScramCredentials carries salt and salted password; the broker derives the keys.
    salted = salted_password(mechanism, "pw", SALT, 4096)
    assert len(salted) == mechanism.digest_size
    from_upsertion = credential_from_salted_password(mechanism, SALT, salted, 4096)
    assert from_upsertion == new_credential(mechanism, "pw", SALT, 4096)
    assert "stored_key" not in repr(from_upsertion)  # secrets stay out of logs


def test_mechanism_codes_and_names_are_kafkas() -> None:
    assert ScramMechanism.from_code(1) is SHA256
    assert ScramMechanism.from_code(2) is SHA512
    assert ScramMechanism.from_code(0) is None
    assert ScramMechanism.from_name("SCRAM-SHA-512") is SHA512
    assert ScramMechanism.from_name("SCRAM-SHA-1") is None


@pytest.mark.parametrize(
    ("name", "code", "iterations", "error"),
    [
        ("alice", 1, 4096, ErrorCode.NONE),
        ("alice", 2, 16384, ErrorCode.NONE),
        ("alice", 1, 4095, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ("alice", 1, 16385, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ("", 1, 4096, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ("alice", 3, 4096, ErrorCode.UNSUPPORTED_SASL_MECHANISM),
    ],
)
def test_upsertion_checks(name: str, code: int, iterations: int, error: ErrorCode) -> None:
    assert validate_upsertion(name, code, iterations)[0] == error


def test_deletion_checks() -> None:
    assert validate_user_and_mechanism("alice", 2) == (ErrorCode.NONE, "")
    assert validate_user_and_mechanism("alice", 0)[0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
