"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as a Kafka broker speaks them: the stored
credential, the server side of one exchange, and the checks AlterUserScramCredentials makes.

The credential is what Kafka keeps in its metadata log (UserScramCredentialRecord): salt,
stored key, server key and iterations, never the password. Kafka's clients send
AlterUserScramCredentials with the salt and the *salted* password; the broker derives the two
keys from it (`credential_from_salted_password`).

The exchange follows Kafka's ScramSaslServer, with these rules:
- Names and passwords are their UTF-8 bytes: no SASLprep (Kafka applies none either).
- The gs2 header must be `n,` (the client does no channel binding), optionally with
  `a=<authzid>`, which must then be the username. `c=` in the final message must be that
  header in base64 (`biws` for `n,,`); Kafka does not check it, the RFC requires it.
- Usernames escape `,` as `=2C` and `=` as `=3D`; any other `=` makes the message malformed.
- Extensions after the client nonce are ignored, except `tokenauth=true` (a delegation token
  login), which is refused: rlog has no delegation tokens. A reserved `m=` is refused (RFC).
- The final message's nonce must end with the combined one, as Kafka checks it: librdkafka
  before 2.6.1 sends its own nonce before the combined one. The proof covers the message
  as sent, so nothing else may change.
- Credentials need 4096 to 16384 iterations (Kafka's bounds for both mechanisms).
- An unknown user gets an exchange that looks like a real one (a salt derived from the name
  with a secret key, so it is the same at every attempt, and 4096 iterations) and fails at the
  proof, exactly as a wrong password does; a client cannot probe which users exist. Kafka
  itself fails an unknown user at the first message, with the same generic error message.
- A proof is checked with `hmac.compare_digest`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.mechanism import AuthenticationFailed

MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms
MAX_ITERATIONS = 16384  # what Kafka's controller accepts in AlterUserScramCredentials
DEFAULT_ITERATIONS = 4096  # kafka-configs' default, and what an unknown user is shown

_TOKEN_AUTH = "tokenauth"
_CLIENT_KEY = b"Client Key"
_SERVER_KEY = b"Server Key"


class ScramMechanism(Enum):
    """The two SCRAM mechanisms Kafka has; `code` is their number on the wire and in records."""

    SCRAM_SHA_256 = (1, "SCRAM-SHA-256", "sha256")
    SCRAM_SHA_512 = (2, "SCRAM-SHA-512", "sha512")

    def __init__(self, code: int, mechanism_name: str, hash_name: str) -> None:
        self.code = code
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.digest_size = hashlib.new(hash_name).digest_size

    @classmethod
    def from_code(cls, code: int) -> ScramMechanism | None:
        return next((m for m in cls if m.code == code), None)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's stored credential for one mechanism (Kafka's UserScramCredentialRecord)."""

    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2 with the mechanism's HMAC, one block long."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """What the broker stores for an AlterUserScramCredentials upsertion."""
    client_key = mechanism.hmac(salted, _CLIENT_KEY)
    return ScramCredential(
        mechanism=mechanism,
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted, _SERVER_KEY),
        iterations=iterations,
    )


def new_credential(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """A credential from a password (the caller brings a random salt: core has no randomness)."""
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def escape_username(username: str) -> str:
    """A username as SCRAM's `saslname`: `=` becomes `=3D`, `,` becomes `=2C`."""
    return username.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str:
    """The inverse of `escape_username`; ValueError if an `=` starts anything but 2C or 3D."""
    parts = saslname.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        code, rest = part[:2], part[2:]
        if code == "2C":
            out.append("," + rest)
        elif code == "3D":
            out.append("=" + rest)
        else:
            raise ValueError(f"bad escape in saslname {saslname!r}")
    return "".join(out)


def validate_upsertion(name: str, mechanism_code: int, iterations: int) -> tuple[ErrorCode, str]:
    """AlterUserScramCredentials' per-user checks on an upsertion, as Kafka's controller makes
    them: (NONE, "") when the credential may be stored."""
    error = validate_user_and_mechanism(name, mechanism_code)
    if error[0] != ErrorCode.NONE:
        return error
    if iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return ErrorCode.NONE, ""


def validate_user_and_mechanism(name: str, mechanism_code: int) -> tuple[ErrorCode, str]:
    """The checks shared by upsertions and deletions (a deletion must also find the
    credential: RESOURCE_NOT_FOUND otherwise, which only the caller can know)."""
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.from_code(mechanism_code) is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return ErrorCode.NONE, ""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AuthenticationFailed(f"bad base64 {text!r}") from exc


def _printable_nonce(nonce: str) -> bool:
    return bool(nonce) and all("\x21" <= c <= "\x7e" and c != "," for c in nonce)


def _mock_salt(key: bytes, mechanism: ScramMechanism, username: str) -> bytes:
    """A fake salt shaped like the ones Kafka's tools make (a random 130-bit number in base 36,
    as ASCII), derived from the name so that every attempt sees the same one."""
    digest = hmac.digest(
        key, b"salt\0" + mechanism.mechanism_name.encode() + b"\0" + username.encode(), "sha256"
    )
    number = int.from_bytes(digest[:17], "big") >> 6  # 136 bits -> 130
    digits = []
    while number:
        number, digit = divmod(number, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
    return "".join(reversed(digits)).encode("ascii") or b"0"


def _mock_credential(key: bytes, mechanism: ScramMechanism, username: str) -> ScramCredential:
    # Keys no client can know, so the proof check runs its usual course and fails.
    keyed = hmac.digest(key, b"keys\0" + username.encode(), mechanism.hash_name)
    return ScramCredential(
        mechanism=mechanism,
        salt=_mock_salt(key, mechanism, username),
        stored_key=mechanism.hash(keyed),
        server_key=mechanism.hmac(keyed, _SERVER_KEY),
        iterations=DEFAULT_ITERATIONS,
    )


class _Stage(Enum):
    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    COMPLETE = "complete"
    FAILED = "failed"


class ScramServer:
    """The server side of one SCRAM exchange: client-first -> server-first, client-final ->
    server-final. Implements `SaslMechanismServer`.

    `lookup(username, mechanism)` gives the stored credential or None. `server_nonce` is this
    exchange's fresh random part of the nonce (printable ASCII without commas; the caller draws
    it, e.g. 24 base64 characters of 18 random bytes). `mock_salt_key` is a secret that fakes
    unknown users' salts: keep it the same on every broker and across restarts, or an attacker
    can spot an unknown user by a salt that changes.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        server_nonce: str,
        mock_salt_key: bytes,
    ) -> None:
        if not _printable_nonce(server_nonce):
            raise ValueError("the server nonce must be printable ASCII without commas")
        self._mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._mock_salt_key = mock_salt_key
        self._stage = _Stage.CLIENT_FIRST
        self._username: str | None = None
        self._credential: ScramCredential | None = None
        self._is_mock = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def mechanism_name(self) -> str:
        return self._mechanism.mechanism_name

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.COMPLETE

    @property
    def authorization_id(self) -> str | None:
        return self._username if self.complete else None

    def evaluate(self, response: bytes) -> bytes:
        try:
            if self._stage is _Stage.CLIENT_FIRST:
                return self._on_client_first(response)
            if self._stage is _Stage.CLIENT_FINAL:
                return self._on_client_final(response)
            raise AuthenticationFailed(f"unexpected SCRAM message after {self._stage.value}")
        except AuthenticationFailed:
            self._fail()
            raise

    def _fail(self) -> None:
        self._stage = _Stage.FAILED
        self._credential = None

    def _on_client_first(self, response: bytes) -> bytes:
        text = _utf8(response)
        # gs2-header: "n," [ "a=" saslname ] "," ; only "n" (no channel binding), as Kafka.
        if not text.startswith("n,"):
            raise AuthenticationFailed("client-first: only gs2 flag 'n' is supported")
        end = text.find(",", 2)
        if end < 0:
            raise AuthenticationFailed("client-first: truncated gs2 header")
        authzid_field = text[2:end]
        if authzid_field and not authzid_field.startswith("a="):
            raise AuthenticationFailed("client-first: malformed authzid")
        self._gs2_header = text[: end + 1]
        bare = text[end + 1 :]
        attributes = bare.split(",")
        if len(attributes) < 2 or not attributes[0].startswith("n="):
            raise AuthenticationFailed("client-first: expected n=username,r=nonce")
        if not attributes[1].startswith("r="):
            raise AuthenticationFailed("client-first: expected r=nonce after the username")
        try:
            username = unescape_username(attributes[0][2:])
            authzid = unescape_username(authzid_field[2:]) if authzid_field else ""
        except ValueError as exc:
            raise AuthenticationFailed(f"client-first: {exc}") from exc
        client_nonce = attributes[1][2:]
        if not username or not _printable_nonce(client_nonce):
            raise AuthenticationFailed("client-first: empty username or bad nonce")
        extensions = _extensions(attributes[2:])
        if extensions.get(_TOKEN_AUTH, "").lower() == "true":
            raise AuthenticationFailed("client-first: delegation tokens are not supported")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "client-first: authzid differs from username",
                "Authentication failed: the authorization id requested differs from the username",
            )
        credential = self._lookup(username, self._mechanism)
        self._is_mock = credential is None or credential.mechanism is not self._mechanism
        if credential is None or self._is_mock:
            credential = _mock_credential(self._mock_salt_key, self._mechanism, username)
        if credential.iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(f"client-first: stored iterations below {MIN_ITERATIONS}")
        self._username = username
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._stage = _Stage.CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _on_client_final(self, response: bytes) -> bytes:
        assert self._credential is not None
        text = _utf8(response)
        proof_at = text.rfind(",p=")
        if proof_at < 0:
            raise AuthenticationFailed("client-final: no proof")
        without_proof = text[:proof_at]
        attributes = without_proof.split(",")
        if len(attributes) < 2 or not attributes[0].startswith("c="):
            raise AuthenticationFailed("client-final: expected c=binding,r=nonce")
        if not attributes[1].startswith("r="):
            raise AuthenticationFailed("client-final: expected r=nonce after the binding")
        _extensions(attributes[2:])  # well-formed, otherwise ignored
        if _b64decode(attributes[0][2:]) != self._gs2_header.encode():
            raise AuthenticationFailed("client-final: channel binding differs from gs2 header")
        if not attributes[1][2:].endswith(self._nonce):
            raise AuthenticationFailed("client-final: nonce mismatch")
        proof = _b64decode(text[proof_at + 3 :])
        mechanism = self._mechanism
        if len(proof) != mechanism.digest_size:
            raise AuthenticationFailed("client-final: proof of the wrong length")
        auth_message = ",".join((self._client_first_bare, self._server_first, without_proof))
        auth_bytes = auth_message.encode()
        client_signature = mechanism.hmac(self._credential.stored_key, auth_bytes)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        proof_ok = hmac.compare_digest(mechanism.hash(client_key), self._credential.stored_key)
        if not proof_ok or self._is_mock:
            raise AuthenticationFailed(
                "client-final: unknown user" if self._is_mock else "client-final: invalid proof"
            )
        server_signature = mechanism.hmac(self._credential.server_key, auth_bytes)
        self._credential = None
        self._stage = _Stage.COMPLETE
        return b"v=" + base64.b64encode(server_signature)


def _utf8(data: bytes) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuthenticationFailed("SCRAM message is not UTF-8") from exc


def _extensions(attributes: list[str]) -> dict[str, str]:
    """`key=value` extensions (key alphabetic, as RFC 5802's attr-val)."""
    found: dict[str, str] = {}
    for attribute in attributes:
        key, sep, value = attribute.partition("=")
        if not sep or not key.isascii() or not key.isalpha():
            raise AuthenticationFailed(f"malformed SCRAM attribute {attribute!r}")
        if key == "m":
            raise AuthenticationFailed("mandatory SCRAM extension 'm' is not supported")
        found[key] = value
    return found
