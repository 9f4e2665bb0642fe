"""Who a connection is, as Kafka's DefaultKafkaPrincipalBuilder names it:

- a PLAINTEXT connection, or an SSL one without a client certificate: `User:ANONYMOUS`;
- an SSL connection with a client certificate: `User:` and the certificate's subject as
  `X500Principal.getName(RFC2253)` writes it: the relative names last to first,
  `CN=client,OU=eng,O=example,C=US`, then mapped by `ssl.principal.mapping.rules`
  (principal_mapping.py; DEFAULT keeps it as it is);
- a SASL connection: `User:` and the name it authenticated as (sasl.py).

`rfc2253_name` reads the subject from its DER encoding (the daemon takes it out of the peer's
certificate), because Java's form depends on the encoding: attributes without an RFC 2253
keyword are written as their OID and the hex of their DER value (`1.2.840.113549.1.9.1=#16...`
for an e-mail address).
"""

from __future__ import annotations

from rlog.core.security.principal_mapping import PrincipalMapper
from rlog.core.security.sasl import ANONYMOUS, USER_PRINCIPAL_TYPE

# The attribute types Java's RFC 2253 form names by keyword (X500Name's RFC 2253 keywords).
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types and how their bytes decode.
_STRING_CODECS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x14: "latin-1",  # TeletexString (as Java reads it)
    0x16: "ascii",  # IA5String
    0x1A: "ascii",  # VisibleString
    0x1C: "utf-32-be",  # UniversalString
    0x1E: "utf-16-be",  # BMPString
}
_ESCAPED = ',+"\\<>;'

SEQUENCE = 0x30
SET = 0x31
OBJECT_IDENTIFIER = 0x06


class DerError(ValueError):
    """The bytes are not the DER encoding of a distinguished name."""


def ssl_principal(subject_der: bytes | None, mapper: PrincipalMapper | None = None) -> str:
    """The principal of an SSL connection whose client certificate has this subject (None: the
    client sent no certificate), its name mapped by `mapper` (ssl.principal.mapping.rules;
    None is DEFAULT). Raises NoMatchingRule if no rule maps it: the client is not let in."""
    if subject_der is None:
        return ANONYMOUS
    name = rfc2253_name(subject_der)
    if mapper is not None:
        name = mapper.name(name)
    return f"{USER_PRINCIPAL_TYPE}:{name}"


def rfc2253_name(name_der: bytes) -> str:
    """An X.501 Name (DER) as Java's `X500Principal.getName(RFC2253)` writes it."""
    tag, body, rest = _element(name_der, 0)
    if tag != SEQUENCE or rest != len(name_der):
        raise DerError("a distinguished name is one SEQUENCE")
    rdns: list[str] = []
    position = 0
    while position < len(body):
        tag, rdn, position = _element(body, position)
        if tag != SET:
            raise DerError("a relative distinguished name is a SET")
        values: list[str] = []
        inner = 0
        while inner < len(rdn):
            tag, attribute, inner = _element(rdn, inner)
            if tag != SEQUENCE:
                raise DerError("an attribute is a SEQUENCE")
            values.append(_attribute(attribute))
        rdns.append("+".join(values))
    return ",".join(reversed(rdns))


def _attribute(der: bytes) -> str:
    tag, oid_bytes, position = _element(der, 0)
    if tag != OBJECT_IDENTIFIER:
        raise DerError("an attribute starts with its type's OID")
    oid = _oid(oid_bytes)
    value_start = position
    tag, value, end = _element(der, position)
    keyword = _KEYWORDS.get(oid)
    codec = _STRING_CODECS.get(tag)
    if keyword is None or codec is None:
        return f"{oid}=#{der[value_start:end].hex()}"
    try:
        text = value.decode(codec)
    except UnicodeDecodeError:
        return f"{oid}=#{der[value_start:end].hex()}"
    return f"{keyword}={_escape(text)}"


def _escape(value: str) -> str:
    """RFC 2253 escaping as Java writes it: the special characters, a leading `#` or space and
    a trailing space get a backslash; control characters become `\\xx`."""
    out: list[str] = []
    for char in value:
        if char in _ESCAPED:
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):02x}")
        else:
            out.append(char)
    if out and out[0] in ("#", " "):
        out[0] = "\\" + out[0]
    if len(out) > 1 and out[-1] == " ":
        out[-1] = "\\ "
    return "".join(out)


def _element(der: bytes, position: int) -> tuple[int, bytes, int]:
    """(tag, contents, position after) of the DER element at `position`."""
    if position + 2 > len(der):
        raise DerError("truncated element")
    tag = der[position]
    length = der[position + 1]
    position += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or position + count > len(der):
            raise DerError("bad length")
        length = int.from_bytes(der[position : position + count], "big")
        position += count
    end = position + length
    if end > len(der):
        raise DerError("truncated element")
    return tag, der[position:end], end


def _oid(contents: bytes) -> str:
    if not contents:
        raise DerError("empty OID")
    arcs: list[int] = []
    value = 0
    for byte in contents:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(arc) for arc in head + arcs[1:])
