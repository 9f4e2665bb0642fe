"""Encoders and decoders generated from the schemas, one pair per (message, version).

Each pair is Python source written from the schema and compiled once at first use, so the hot
path (a Produce decoded, a Fetch response encoded per request) runs straight-line code: runs of
fixed-size fields are one `struct` call, and flexible versions (compact lengths, tagged fields)
cost nothing extra to support because the generator writes them too.

Conventions (see connection.py for the framing):
- Values are dicts keyed by the snake_case field name; arrays are lists; uuid is `uuid.UUID`;
  bytes decode to `bytes`; records decode to a `memoryview` into the frame (no copy).
- Decoding fills every field of the struct: fields not in that version (or tagged and absent)
  take their default, so callers never branch on the version to read a field.
- Encoding reads only the fields of that version; a missing key takes the default. A records
  value may be bytes-like or any object with an int `size` (a file slice): the encoder then
  emits it as a separate part, for the caller to sendfile.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from .schema import ZERO_UUID, Field, Message, Struct, load_message

# A part of an encoded message: bytes, or a file-slice-like object with a `size`.
Part = Any
EncodeFn = Callable[[bytearray, list[Part], dict[str, Any]], None]
DecodeFn = Callable[[memoryview, int, int], tuple[dict[str, Any], int]]


class DecodeError(ValueError):
    """The bytes do not match the schema: the peer's fault."""


class EncodeError(ValueError):
    """A body dict does not fit the schema: a bug on our side."""


# struct codes and sizes of the fixed-size types.
_FIXED = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}
_BYTES_LIKE = (bytes, bytearray, memoryview)
_NULL_I16 = b"\xff\xff"
_NULL_I32 = b"\xff\xff\xff\xff"
# A uvarint of a 32-bit value takes at most 5 bytes; more is garbage, not a long number.
_UVARINT_BYTES_MAX = 5


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint at `pos` -> (value, position after it)."""
    value = 0
    for shift in range(0, 7 * _UVARINT_BYTES_MAX, 7):
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise DecodeError("varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0 or value >= 1 << 32:
        raise EncodeError(f"uvarint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def skip_tags(buf: memoryview, pos: int, end: int) -> int:
    """Skip a tagged-field section none of whose tags we know."""
    count, pos = read_uvarint(buf, pos)
    if count > end - pos:
        raise _truncated()
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise _truncated()
    return pos


def _truncated() -> DecodeError:
    return DecodeError("field runs past the end of the frame")


def _null(name: str) -> DecodeError:
    return DecodeError(f"non-nullable field {name} is null")


class Codec:
    """The compiled encoder and decoder of one message at one version."""

    __slots__ = ("_decode", "_encode", "flexible", "message", "source", "version")

    def __init__(
        self, message: Message, version: int, encode: EncodeFn, decode: DecodeFn, source: str
    ) -> None:
        self.message = message
        self.source = source  # the generated Python, for reading and debugging
        self.version = version
        self.flexible = message.flexible(version)
        self._encode = encode
        self._decode = decode

    def __repr__(self) -> str:
        return f"<Codec {self.message.name} v{self.version}>"

    def decode(self, buf: memoryview | bytes, pos: int = 0) -> tuple[dict[str, Any], int]:
        """Decode at `pos` -> (value, position after it). Malformed input -> DecodeError."""
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        try:
            return self._decode(view, pos, len(view))
        except DecodeError as exc:
            raise DecodeError(f"{self.message.name} v{self.version}: {exc}") from None
        except (struct.error, IndexError, ValueError, OverflowError) as exc:
            # Truncated fixed fields (struct.error, IndexError), bad UTF-8 (ValueError): the
            # generated code checks lengths only where a slice would silently come up short.
            raise DecodeError(f"{self.message.name} v{self.version}: {exc}") from None

    def encode_into(self, out: bytearray, parts: list[Part], value: dict[str, Any]) -> None:
        """Append the encoding to `out`; a file slice flushes `out` into `parts` (see encode)."""
        try:
            self._encode(out, parts, value)
        except EncodeError as exc:
            raise EncodeError(f"{self.message.name} v{self.version}: {exc}") from None
        except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"{self.message.name} v{self.version}: {exc!r}") from exc

    def encode(self, value: dict[str, Any]) -> bytes:
        """Encode a value that holds no file slices (requests, headers, small responses)."""
        out = bytearray()
        parts: list[Part] = []
        self.encode_into(out, parts, value)
        if parts:
            raise EncodeError(f"{self.message.name}: a file slice needs encode_into")
        return bytes(out)


@cache
def codec_for(message_name: str, version: int) -> Codec:
    """The codec of `schemas/<message_name>.json` at `version`, compiled at first use."""
    message = load_message(message_name)
    if version not in message.valid_versions:
        raise ValueError(f"{message_name} has no version {version}")
    return _compile(message, version)


def _compile(message: Message, version: int) -> Codec:
    gen = _Generator(message, version)
    encode_name = gen.encoder(message.struct)
    decode_name = gen.decoder(message.struct)
    namespace = gen.namespace()
    source = "\n".join(gen.lines)
    code = compile(source, f"<codec {message.name} v{version}>", "exec")
    exec(code, namespace)
    return Codec(message, version, namespace[encode_name], namespace[decode_name], source)


class _Generator:
    """Writes the Python source of one message version's encoder and decoder functions."""

    def __init__(self, message: Message, version: int) -> None:
        self.message = message
        self.version = version
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self._made: dict[tuple[str, int], str] = {}
        self._counter = 0

    def namespace(self) -> dict[str, Any]:
        return {
            "__builtins__": __builtins__,
            "struct": struct,
            "UUID": uuid.UUID,
            "ZU": ZERO_UUID,
            "BYTES_LIKE": _BYTES_LIKE,
            "DecodeError": DecodeError,
            "EncodeError": EncodeError,
            "read_uvarint": read_uvarint,
            "skip_tags": skip_tags,
            "write_uvarint": write_uvarint,
            "truncated": _truncated,
            "null": _null,
            "unpack_from": struct.unpack_from,
            "pack": struct.pack,
            "I32": struct.Struct(">i"),
            "I16": struct.Struct(">h"),
            "I8": struct.Struct(">b"),
            **self.constants,
        }

    # -- helpers -------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def constant(self, value: Any) -> str:
        name = self.fresh("K")
        self.constants[name] = value
        return name

    def flexible(self, field: Field) -> bool:
        if field.flexible_versions is not None:
            return self.version in field.flexible_versions
        return self.message.flexible(self.version)

    def literal(self, value: Any) -> str:
        """Source that builds `value` afresh (mutable defaults must not be shared)."""
        if isinstance(value, dict):
            items = ", ".join(f"{k!r}: {self.literal(v)}" for k, v in value.items())
            return "{" + items + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.literal(v) for v in value) + "]"
        if isinstance(value, uuid.UUID):
            return "ZU" if value == ZERO_UUID else self.constant(value)
        return repr(value)

    def wire_fields(self, st: Struct) -> tuple[list[Field], list[Field]]:
        """(fields in the body, in order; tagged fields, by tag) at this version."""
        flexible = self.message.flexible(self.version)
        body: list[Field] = []
        tagged: list[Field] = []
        for field in st.fields:
            if not field.present(self.version):
                continue
            if flexible and field.tagged(self.version):
                tagged.append(field)
            else:
                body.append(field)
        tagged.sort(key=lambda f: f.tag or 0)
        return body, tagged

    # -- decoders ------------------------------------------------------------------------------

    def decoder(self, st: Struct) -> str:
        key = ("d", id(st))
        if key in self._made:
            return self._made[key]
        name = self.fresh("decode_")
        self._made[key] = name
        body_fields, tagged = self.wire_fields(st)
        variables = {f.key: self.fresh("f") for f in st.fields}
        code: list[str] = []
        for run in _fixed_runs(body_fields):
            if len(run) > 1:
                code += self.decode_fixed_run(run, [variables[f.key] for f in run])
            else:
                code += self.decode_value(run[0], variables[run[0].key])
        if self.message.flexible(self.version):
            code += self.decode_tags(tagged, variables)
        wire = {f.key for f in body_fields} | {f.key for f in tagged}
        items = []
        for field in st.fields:
            if field.key in wire:
                items.append(f"{field.key!r}: {variables[field.key]}")
            else:
                items.append(f"{field.key!r}: {self.literal(field.default_value(self.version))}")
        code.append("return {" + ", ".join(items) + "}, pos")
        self.lines.append(f"def {name}(buf, pos, end):")
        self.lines += ["    " + line for line in code]
        return name

    def decode_fixed_run(self, run: list[Field], names: list[str]) -> list[str]:
        fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
        packer = self.constant(struct.Struct(fmt))
        size = struct.calcsize(fmt)
        return [f"{', '.join(names)}, = {packer}.unpack_from(buf, pos)", f"pos += {size}"]

    def decode_length(self, compact: bool, prefix: str, var: str) -> list[str]:
        """Read a length into `var` (-1 = null) from an int16/int32 or a compact uvarint."""
        if compact:
            return [
                f"{var} = buf[pos]",
                "pos += 1",
                f"if {var} > 127:",
                f"    {var}, pos = read_uvarint(buf, pos - 1)",
                f"{var} -= 1",
            ]
        return [f"{var}, = {prefix}.unpack_from(buf, pos)", f"pos += {4 if prefix == 'I32' else 2}"]

    def decode_value(self, field: Field, var: str) -> list[str]:
        """Code that decodes one field at `pos` into `var` and moves `pos` past it."""
        if field.is_array:
            return self.decode_array(field, var)
        if field.struct is not None:
            sub = self.decoder(field.struct)
            call = f"{var}, pos = {sub}(buf, pos, end)"
            if not field.nullable(self.version):
                return [call]
            marker = self.fresh("m")
            return [
                f"{marker}, = I8.unpack_from(buf, pos)",
                "pos += 1",
                f"if {marker} < 0:",
                f"    {var} = None",
                "else:",
                f"    {call}",
            ]
        return self.decode_scalar(field, field.type, var, field.nullable(self.version))

    def decode_scalar(self, field: Field, type_name: str, var: str, nullable: bool) -> list[str]:
        if type_name in _FIXED:
            code, size = _FIXED[type_name]
            packer = self.constant(struct.Struct(">" + code))
            return [f"{var}, = {packer}.unpack_from(buf, pos)", f"pos += {size}"]
        if type_name == "uuid":
            stop = self.fresh("e")
            return [
                f"{stop} = pos + 16",
                f"if {stop} > end:",
                "    raise truncated()",
                f"{var} = UUID(bytes=bytes(buf[pos:{stop}]))",
                f"pos = {stop}",
            ]
        # string, bytes, records: a length (int16 for strings, int32 otherwise), then the data.
        length = self.fresh("n")
        stop = self.fresh("e")
        prefix = "I16" if type_name == "string" else "I32"
        lines = self.decode_length(self.flexible(field), prefix, length)
        if type_name == "string":
            make = f"str(buf[pos:{stop}], 'utf-8')"
        elif type_name == "bytes":
            make = f"bytes(buf[pos:{stop}])"
        else:
            make = f"buf[pos:{stop}]"  # records: a view into the frame, no copy
        lines.append(f"if {length} < 0:")
        lines.append(f"    {var} = None" if nullable else f"    raise null({field.name!r})")
        lines += [
            "else:",
            f"    {stop} = pos + {length}",
            f"    if {stop} > end:",
            "        raise truncated()",
            f"    {var} = {make}",
            f"    pos = {stop}",
        ]
        return lines

    def decode_array(self, field: Field, var: str) -> list[str]:
        count = self.fresh("n")
        code = self.decode_length(self.flexible(field), "I32", count)
        code.append(f"if {count} < 0:")
        if field.nullable(self.version):
            code.append(f"    {var} = None")
        else:
            code.append(f"    raise null({field.name!r})")
        code.append("else:")
        if field.struct is None and field.type in _FIXED:
            letter, size = _FIXED[field.type]
            total = self.fresh("t")
            return [
                *code,
                f"    {total} = {count} * {size}",
                f"    if pos + {total} > end:",
                "        raise truncated()",
                f"    {var} = list(unpack_from('>%d{letter}' % {count}, buf, pos))",
                f"    pos += {total}",
            ]
        # Every element takes at least one byte, so a count beyond the bytes left is a lie; this
        # check keeps a forged count from looping a billion times.
        code += [f"    if {count} > end - pos:", "        raise truncated()", f"    {var} = []"]
        element = self.fresh("x")
        loop = [f"    for _ in range({count}):"]
        if field.struct is not None:
            loop.append(f"        {element}, pos = {self.decoder(field.struct)}(buf, pos, end)")
        else:
            inner = self.decode_scalar(field, field.type, element, nullable=False)
            loop += ["        " + line for line in inner]
        loop.append(f"        {var}.append({element})")
        return code + loop

    def decode_tags(self, tagged: list[Field], variables: dict[str, str]) -> list[str]:
        if not tagged:
            return ["if buf[pos]:", "    pos = skip_tags(buf, pos, end)", "else:", "    pos += 1"]
        count = self.fresh("nt")
        code = [
            f"{variables[f.key]} = {self.literal(f.default_value(self.version))}" for f in tagged
        ]
        code += [
            f"{count} = buf[pos]",
            "pos += 1",
            f"if {count} > 127:",
            f"    {count}, pos = read_uvarint(buf, pos - 1)",
            f"if {count} > end - pos:",
            "    raise truncated()",
            f"for _ in range({count}):",
            "    tag, pos = read_uvarint(buf, pos)",
            "    size, pos = read_uvarint(buf, pos)",
            "    stop = pos + size",
            "    if stop > end:",
            "        raise truncated()",
        ]
        keyword = "if"
        for field in tagged:
            code.append(f"    {keyword} tag == {field.tag}:")
            code += ["        " + line for line in self.decode_value(field, variables[field.key])]
            code += ["        if pos > stop:", "            raise truncated()"]
            keyword = "elif"
        code.append("    pos = stop  # unknown tags are skipped")
        return code

    # -- encoders ------------------------------------------------------------------------------

    def encoder(self, st: Struct) -> str:
        key = ("e", id(st))
        if key in self._made:
            return self._made[key]
        name = self.fresh("encode_")
        self._made[key] = name
        body_fields, tagged = self.wire_fields(st)
        code: list[str] = ["get = d.get"]
        for run in _fixed_runs(body_fields):
            if len(run) > 1:
                code += self.encode_fixed_run(run)
            else:
                var = self.fresh("v")
                code += self.load(run[0], var)
                code += self.encode_value(run[0], var, "out")
        if self.message.flexible(self.version):
            code += self.encode_tags(tagged)
        if not code:
            code.append("pass")
        self.lines.append(f"def {name}(out, parts, d):")
        self.lines += ["    " + line for line in code]
        return name

    def default_source(self, field: Field) -> str:
        """Source for the value a missing key encodes as (shared: encoders only read it)."""
        value = field.default_value(self.version)
        if isinstance(value, list):
            return "()"
        if isinstance(value, dict):
            return self.constant(value)
        if isinstance(value, uuid.UUID):
            return self.literal(value)
        return repr(value)

    def load(self, field: Field, var: str) -> list[str]:
        return [f"{var} = get({field.key!r}, {self.default_source(field)})"]

    def encode_fixed_run(self, run: list[Field]) -> list[str]:
        fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
        packer = self.constant(struct.Struct(fmt))
        args = ", ".join(f"get({f.key!r}, {self.default_source(f)})" for f in run)
        return [f"out += {packer}.pack({args})"]

    def encode_length(self, compact: bool, prefix: str, length: str, out: str) -> list[str]:
        """Write `length` (-1 = null) as int16/int32, or as a compact uvarint of length + 1."""
        if compact and length == "-1":
            return [f"{out}.append(0)"]
        if compact:
            return [
                f"if {length} < 127:",
                f"    {out}.append({length} + 1)",
                "else:",
                f"    write_uvarint({out}, {length} + 1)",
            ]
        if length == "-1":
            return [f"{out} += {_NULL_I16 if prefix == 'I16' else _NULL_I32!r}"]
        return [f"{out} += {prefix}.pack({length})"]

    def encode_value(self, field: Field, var: str, out: str) -> list[str]:
        """Code that appends the encoding of the value in `var` to the bytearray `out`."""
        if field.is_array:
            return self.encode_array(field, var, out)
        if field.struct is not None:
            call = f"{self.encoder(field.struct)}({out}, parts, {var})"
            if not field.nullable(self.version):
                return [call]
            # A nullable struct carries an int8 marker: -1 null, 1 present.
            return self.null_or(True, var, [f"{out}.append(255)"], [f"{out}.append(1)", call])
        return self.encode_scalar(field, field.type, var, out, field.nullable(self.version))

    def encode_scalar(
        self, field: Field, type_name: str, var: str, out: str, nullable: bool
    ) -> list[str]:
        if type_name in _FIXED:
            packer = self.constant(struct.Struct(">" + _FIXED[type_name][0]))
            return [f"{out} += {packer}.pack({var})"]
        if type_name == "uuid":
            return [f"{out} += {var}.bytes"]
        compact = self.flexible(field)
        prefix = "I16" if type_name == "string" else "I32"
        if type_name == "records":
            body = self.encode_records(var, out, compact, prefix)
        else:
            data = self.fresh("b")
            body = [f"{data} = {var}.encode()" if type_name == "string" else f"{data} = {var}"]
            body += self.encode_length(compact, prefix, f"len({data})", out)
            body.append(f"{out} += {data}")
        return self.null_or(nullable, var, self.encode_length(compact, prefix, "-1", out), body)

    @staticmethod
    def null_or(nullable: bool, var: str, if_null: list[str], body: list[str]) -> list[str]:
        if not nullable:
            return body
        return [f"if {var} is None:", *_indent(if_null), "else:", *_indent(body)]

    def encode_records(self, var: str, out: str, compact: bool, prefix: str) -> list[str]:
        """Bytes-like records are copied in; a file slice becomes its own part, after `out`."""
        if out != "out":
            raise AssertionError("records inside a tagged field are not supported")
        size = self.fresh("s")
        return [
            f"if isinstance({var}, BYTES_LIKE):",
            f"    {size} = memoryview({var}).nbytes",
            *_indent(self.encode_length(compact, prefix, size, out)),
            f"    {out} += {var}",
            "else:  # a file slice: its bytes go out by sendfile, after the bytes so far",
            f"    {size} = {var}.size",
            *_indent(self.encode_length(compact, prefix, size, out)),
            f"    parts.append(bytes({out}))",
            f"    parts.append({var})",
            f"    {out}.clear()",
        ]

    def encode_array(self, field: Field, var: str, out: str) -> list[str]:
        compact = self.flexible(field)
        body = self.encode_length(compact, "I32", f"len({var})", out)
        if field.struct is None and field.type in _FIXED:
            letter = _FIXED[field.type][0]
            body.append(f"{out} += pack('>%d{letter}' % len({var}), *{var})")
        else:
            element = self.fresh("x")
            body.append(f"for {element} in {var}:")
            if field.struct is not None:
                body.append(f"    {self.encoder(field.struct)}({out}, parts, {element})")
            else:
                body += _indent(self.encode_scalar(field, field.type, element, out, False))
        if_null = self.encode_length(compact, "I32", "-1", out)
        return self.null_or(field.nullable(self.version), var, if_null, body)

    def encode_tags(self, tagged: list[Field]) -> list[str]:
        if not tagged:
            return ["out.append(0)  # no tagged fields"]
        found = self.fresh("tags")
        code = [f"{found} = []"]
        for field in tagged:
            var = self.fresh("v")
            buf = self.fresh("tb")
            # Like Kafka, a tagged field equal to its default is left out.
            default = field.default_value(self.version)
            source = self.default_source(field)
            code.append(f"{var} = get({field.key!r}, {source})")
            if default is None:
                code.append(f"if {var} is not None:")
            elif isinstance(default, list):
                code.append(f"if {var} is None or len({var}):")
            else:
                code.append(f"if {var} != {source}:")
            code.append(f"    {buf} = bytearray()")
            code += ["    " + x for x in self.encode_value(field, var, buf)]
            code.append(f"    {found}.append(({field.tag}, {buf}))")
        code += [
            f"write_uvarint(out, len({found}))",
            f"for tag, tb in {found}:",
            "    write_uvarint(out, tag)",
            "    write_uvarint(out, len(tb))",
            "    out += tb",
        ]
        return code


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _is_fixed(field: Field) -> bool:
    return not field.is_array and field.struct is None and field.type in _FIXED


def _fixed_runs(fields: list[Field]) -> list[list[Field]]:
    """Group consecutive fixed-size scalar fields, so each group is one struct call."""
    runs: list[list[Field]] = []
    for field in fields:
        if _is_fixed(field) and runs and _is_fixed(runs[-1][-1]):
            runs[-1].append(field)
        else:
            runs.append([field])
    return runs
