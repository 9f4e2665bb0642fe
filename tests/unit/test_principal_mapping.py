"""ssl.principal.mapping.rules (KIP-371) as Kafka reads them: rules in order, the first whose
pattern matches the whole DN names it (Java's replacement syntax, L/U for case), DEFAULT keeps
the DN, no match shuts the client out, and a malformed list is refused at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlog.cli.certificates import demo_files
from rlog.core.security.principal import ssl_principal
from rlog.core.security.principal_mapping import NoMatchingRule, PrincipalMapper
from rlog.daemon.broker.authorization import check_own_certificate
from rlog.daemon.config import BrokerSettings, ConfigError, broker_settings

# The rules of Kafka's documentation for ssl.principal.mapping.rules.
KAFKA_EXAMPLE = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=JavaSoft,o=Sun Microsystems", "duke"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_the_first_rule_that_applies_names_the_dn(dn: str, name: str) -> None:
    assert PrincipalMapper(KAFKA_EXAMPLE).name(dn) == name


def test_upper_case_newline_separators_and_javas_replacement_syntax() -> None:
    mapper = PrincipalMapper("RULE:^CN=([^,]*),OU=(.*)$/$2.$1/U\nDEFAULT")
    assert mapper.name("CN=app,OU=eng") == "ENG.APP"
    # \\$ is a dollar sign; a group past the pattern's stays text; $12 with two groups is $1, "2".
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=(.*)$/\$1 $9 $12/")
    assert mapper.name("CN=a,OU=b") == "$1 $9 a2"


def test_no_rule_applying_is_an_error_and_default_is_the_dn_itself() -> None:
    mapper = PrincipalMapper("RULE:^CN=rlog-([a-z]+),O=demo$/$1/")
    assert mapper.name("CN=rlog-client,O=demo") == "client"
    with pytest.raises(NoMatchingRule, match="CN=stranger,O=demo"):
        mapper.name("CN=stranger,O=demo")
    for default in ("DEFAULT", "", "  DEFAULT  "):
        assert PrincipalMapper(default).is_default
        assert PrincipalMapper(default).name("CN=x,O=y") == "CN=x,O=y"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAUL",
        "DEFAULT/L",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU",
        "RULE:^CN=(/$1/",
    ],
)
def test_a_malformed_rule_list_is_refused_with_the_rule_named(rules: str) -> None:
    with pytest.raises(ValueError, match=r"ssl\.principal\.mapping\.rules"):
        PrincipalMapper(rules)
    with pytest.raises(ConfigError, match=r"\[broker\] ssl\.principal\.mapping\.rules"):
        broker_settings({"ssl.principal.mapping.rules": rules})


def test_the_principal_of_a_certificate_is_its_mapped_subject() -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "demo"),
            x509.NameAttribute(NameOID.COMMON_NAME, "rlog-client"),
        ]
    ).public_bytes()
    assert ssl_principal(subject) == "User:CN=rlog-client,O=demo"
    mapper = PrincipalMapper("RULE:^CN=rlog-([a-z]+),O=demo$/$1/U")
    assert ssl_principal(subject, mapper) == "User:CLIENT"
    assert ssl_principal(None, mapper) == "User:ANONYMOUS"  # no certificate: nothing to map


def test_rules_that_do_not_name_the_brokers_own_certificate_stop_them_at_start(
    tmp_path: Path,
) -> None:
    """rlog's own processes present the keystore's certificate to SSL listeners that ask for
    one: rules that shut it out are a config error, not a cluster that cannot replicate."""
    files = demo_files(tmp_path)  # the brokers' certificate: CN=rlog-broker,O=rlog demo
    clients_only = "RULE:^CN=rlog-client,O=(.*)$/client/"
    settings = BrokerSettings(
        ssl_keystore_location=str(files.broker),
        ssl_client_auth="required",
        ssl_principal_mapping_rules=clients_only,
    )
    with pytest.raises(ValueError, match=r"own certificate .*: no ssl\.principal"):
        check_own_certificate(settings, PrincipalMapper(clients_only))
    named = "RULE:^CN=rlog-([a-z]+),O=(.*)$/$1/"
    check_own_certificate(settings, PrincipalMapper(named))
    # Certificates not asked for are not presented: nothing to name.
    not_asked = BrokerSettings(ssl_keystore_location=str(files.broker), ssl_client_auth="none")
    check_own_certificate(not_asked, PrincipalMapper(clients_only))
