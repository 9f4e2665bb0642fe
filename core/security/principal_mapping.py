"""`ssl.principal.mapping.rules` (KIP-371): the name an SSL client certificate's subject maps to.

Kafka's syntax, a list of rules tried in order, the first that applies giving the name:

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=([^,]*).*$/$1/L,DEFAULT

- `RULE:pattern/replacement/` applies when the pattern matches the whole distinguished name
  (RFC 2253, as principal.py writes it); the name is then the DN with every match of the
  pattern replaced (Java's `String.replaceAll`: `$1` is a group, `\\` escapes the next
  character). A trailing `L` or `U` lower- or upper-cases the result.
- `DEFAULT` applies to every DN and gives it unchanged.
- Rules are separated by commas or newlines; a comma inside a pattern belongs to the pattern.

A DN that no rule applies to has no name: Kafka fails the client's authentication
(`NoMatchingRule`). Patterns are Python regular expressions, which agree with Java's on the
constructs such rules use (groups, classes, lazy quantifiers, anchors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"

# One rule and the separator after it, as Kafka's SslPrincipalMapper splits the list: a
# pattern or replacement is any run of escaped characters or characters other than \ and /.
_RULE_SPLITTER = re.compile(
    r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?)\s*(?:[,\n]\s*|$)"
)
_RULE_PARSER = re.compile(r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)(.*)")


class NoMatchingRule(ValueError):
    """No rule maps the distinguished name: the client cannot be authenticated."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str  # a Python re template
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


class PrincipalMapper:
    """The rules of one `ssl.principal.mapping.rules` value."""

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        """Raises ValueError, naming the rule, if `rules` is not a valid list."""
        self._rules = tuple(_parse(rule) for rule in _split(rules))
        self.is_default = all(rule.pattern is None for rule in self._rules)

    def name(self, dn: str) -> str:
        """The name `dn` maps to; NoMatchingRule if no rule applies."""
        for rule in self._rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")


def _split(rules: str) -> list[str]:
    text = rules.strip()
    if not text:
        return [DEFAULT_RULES]  # Kafka's default for an empty value
    found: list[str] = []
    position = 0
    while position < len(text):
        match = _RULE_SPLITTER.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(
                f"ssl.principal.mapping.rules: invalid rule at {text[position:]!r} (rules are "
                "RULE:pattern/replacement/[LU] or DEFAULT, separated by commas)"
            )
        found.append(match.group(1))
        position = match.end()
    return found


def _parse(rule: str) -> _Rule:
    match = _RULE_PARSER.fullmatch(rule)
    if match is None or match.group(5):
        raise ValueError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")
    if match.group(1):
        return _Rule(None, "", "")
    try:
        pattern = re.compile(match.group(2))
    except re.error as error:
        raise ValueError(
            f"ssl.principal.mapping.rules: rule {rule!r}: bad pattern: {error}"
        ) from None
    replacement = _python_template(match.group(3), pattern.groups)
    return _Rule(pattern, replacement, match.group(4))


def _python_template(java: str, groups: int) -> str:
    """Java's replacement syntax as a Python re template: `$n` a group (as many digits as
    still name a group, as Java reads them), `\\x` the character x; a `$n` past the pattern's
    groups stays literal text (Kafka escapes those before replacing)."""
    out: list[str] = []
    index = 0
    while index < len(java):
        char = java[index]
        if char == "\\" and index + 1 < len(java):
            out.append(_literal(java[index + 1]))
            index += 2
            continue
        if char == "$" and index + 1 < len(java) and java[index + 1].isdigit():
            end = index + 2
            number = int(java[index + 1])
            while (
                end < len(java) and java[end].isdigit() and int(java[index + 1 : end + 1]) <= groups
            ):
                number = int(java[index + 1 : end + 1])
                end += 1
            if number <= groups:
                out.append(f"\\g<{number}>")
            else:
                out.append(_literal(java[index:end]))
            index = end
            continue
        out.append(_literal(char))
        index += 1
    return "".join(out)


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\")
