"""ACL enforcement on a broker's listeners: who each connection is, the ruling on each request
(core/security/enforcement.py decides; this module supplies the principal, the image and the
clock), and the journal of denials.

Only built when `authorizer.class.name` is set: without it a listener has no `Authorization`
and a request costs nothing more than before.

rlog's own processes (followers, the transaction markers and KIP-890 checks between brokers,
rlogd's checks, the CLI) connect to the inter-broker listener, which is PLAINTEXT or SSL:
- on SSL they present the brokers' own keystore certificate, and that certificate's principal
  (`User:CN=...`) is a super user, as Kafka's brokers are listed in `super.users`;
- on PLAINTEXT nothing tells them from anyone else who reaches the port. Kafka would need
  `super.users=User:ANONYMOUS` there, which makes ANONYMOUS a super user on every PLAINTEXT
  listener; rlog instead trusts the inter-broker listener's connections only (and says so at
  start): bind it to 127.0.0.1, or make it SSL, and serve clients on a SASL or SSL listener.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlog.core.controller.security_admin import ERROR_ANSWERS as SECURITY_ERROR_ANSWERS
from rlog.core.controller.security_admin import security_error_answer
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import Authorizer, ResourceType, parse_super_users
from rlog.core.security.authorized_operations import OperationsOf
from rlog.core.security.denials import DenialThrottle
from rlog.core.security.enforcement import BrokerView, Denial, Requester, Ruling, rule
from rlog.core.security.principal import ssl_principal
from rlog.core.security.principal_mapping import NoMatchingRule, PrincipalMapper
from rlog.daemon.config import BrokerSettings
from rlog.daemon.error_answers import ERROR_ANSWERS, error_answer
from rlog.daemon.events import SECURITY_KINDS, EventJournal
from rlog.daemon.listeners import Listener

log = logging.getLogger(__name__)

Body = dict[str, Any]
DENIAL_KIND = SECURITY_KINDS[0]


class Authorization:
    """One broker's enforcement, shared by its listeners."""

    def __init__(
        self,
        settings: BrokerSettings,
        image: Callable[[], MetadataImage],
        journal: EventJournal | None,
        *,
        own_principal: str | None = None,
    ) -> None:
        """`own_principal`: the principal of the brokers' own certificate (SSL), a super user."""
        super_users = set(parse_super_users(settings.super_users))
        if own_principal is not None:
            super_users.add(own_principal)
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = settings.allow_everyone_if_no_acl_found
        self.auto_create_topics = settings.auto_create_topics_enable
        self._image = image
        self.journal = journal
        self.throttle = DenialThrottle()
        self.denials = 0  # every denial, journaled or not

    def exempt(self, principal: str) -> bool:
        """Whether requests of `principal` skip the checks: a super user may do anything."""
        return principal in self.super_users

    def _authorizer(self, image: MetadataImage) -> Authorizer:
        # The settings live here, the ACLs in the image: the image's authorizer decides with
        # them (it is one object, updated in place as ACL records arrive).
        authorizer = image.authorizer
        authorizer.super_users = self.super_users
        authorizer.allow_if_no_acl = self.allow_if_no_acl
        return authorizer

    def operations(self, principal: str, host: str) -> OperationsOf:
        """What the principal's ACLs allow on a resource, as the bits of KIP-430's answers."""
        authorizer = self._authorizer(self._image())

        def allowed(resource_type: ResourceType, name: str) -> int:
            return authorizer.authorized_operations(principal, host, resource_type, name)

        return allowed

    def rule(self, request: Request, principal: str, host: str) -> Ruling:
        image = self._image()
        authorizer = self._authorizer(image)
        view = BrokerView(
            authorizer, image.topics, image.topic_names_by_id, self.auto_create_topics
        )
        ruling = rule(
            request.api_key,
            request.api_version,
            request.body or {},
            Requester(principal, host),
            view,
        )
        if ruling.denials:
            self._record(ruling.denials, principal, host)
        return ruling

    def _record(self, denials: list[Denial], principal: str, host: str) -> None:
        now_ms = time.monotonic_ns() // 1_000_000
        for denial in denials:
            self.denials += 1
            key = (principal, denial.operation, denial.resource_type, denial.resource_name)
            suppressed = self.throttle.admit(key, now_ms)
            if suppressed is None:
                continue
            api = _api_name(denial.api_key)
            message = (
                f"{principal} from {host or '?'} denied {denial.operation.name} on "
                f"{denial.resource_type.name} {denial.resource_name} ({api}: "
                f"{ErrorCode(denial.error).name})"
            )
            if suppressed:
                message += f"; {suppressed} more denials of it left out of the journal"
            log.info("%s", message)
            if self.journal is not None:
                self.journal.record(
                    DENIAL_KIND,
                    message,
                    principal=principal,
                    host=host,
                    operation=denial.operation.name,
                    resource_type=denial.resource_type.name,
                    resource_name=denial.resource_name,
                    api=api,
                    error=ErrorCode(denial.error).name,
                    suppressed=suppressed,
                )


def refusal(request: Request, error: ErrorCode) -> Body:
    """The answer refusing a whole request with `error`, in its API's shape."""
    api_key = request.api_key
    if api_key in SECURITY_ERROR_ANSWERS:
        return security_error_answer(ApiKey(api_key), request.body or {}, error)
    if api_key in ERROR_ANSWERS:
        return error_answer(request, error)
    return {"throttle_time_ms": 0, "error_code": error}


def acl_host(client_host: str) -> str:
    """The client's address as ACLs name hosts (the listener keeps Kafka's `/1.2.3.4`)."""
    return client_host.removeprefix("/")


def certificate_principal(certificate_der: bytes | None, mapper: PrincipalMapper) -> str:
    """The principal of an SSL connection from its client certificate (DER), if it sent one.
    NoMatchingRule if `mapper`'s rules give its subject no name."""
    if certificate_der is None:
        return ssl_principal(None)
    from cryptography import x509  # only SSL listeners with client certificates need it

    subject = x509.load_der_x509_certificate(certificate_der).subject.public_bytes()
    return ssl_principal(subject, mapper)


def keystore_principal(keystore_location: str, mapper: PrincipalMapper) -> str | None:
    """The principal of the first certificate in a PEM keystore (the brokers' own), if any,
    as `mapper` names it. ValueError if no rule maps it: rlog's own processes would be shut
    out."""
    if not keystore_location:
        return None
    from cryptography import x509

    certificates = x509.load_pem_x509_certificates(Path(keystore_location).read_bytes())
    if not certificates:
        return None
    try:
        return ssl_principal(certificates[0].subject.public_bytes(), mapper)
    except NoMatchingRule as error:
        raise ValueError(f"the brokers' own certificate in {keystore_location}: {error}") from None


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def check_own_certificate(settings: BrokerSettings, mapper: PrincipalMapper) -> None:
    """ValueError (or OSError) if ssl.principal.mapping.rules give the brokers' own certificate
    no name while SSL listeners ask for certificates: rlog's own processes present it, and
    would be shut out."""
    if mapper.is_default or settings.ssl_client_auth == "none":
        return
    keystore_principal(settings.ssl_keystore_location, mapper)


def broker_authorization(
    settings: BrokerSettings,
    image: Callable[[], MetadataImage],
    journal: EventJournal | None,
    listeners: list[Listener],
    mapper: PrincipalMapper,
) -> Authorization | None:
    """The broker's enforcement, or None when `authorizer.class.name` is not set. `listeners`:
    the broker's, the inter-broker one first; `mapper`: ssl.principal.mapping.rules. OSError
    or ValueError if the keystore's certificate (the brokers' own principal on SSL) cannot be
    read or named."""
    if not settings.authorization_enabled:
        return None
    inter_broker = listeners[0]
    own_principal = None
    if inter_broker.uses_tls:
        own_principal = keystore_principal(settings.ssl_keystore_location, mapper)
        log.info(
            "authorization on; rlog's own processes (the brokers' certificate) are %s, a super "
            "user",
            own_principal,
        )
    else:
        log.warning(
            "authorization on, but the inter-broker listener %s is PLAINTEXT: every connection "
            "to it is trusted as rlog's own (bind it to 127.0.0.1 or make it SSL; serve clients "
            "on a SASL or SSL listener)",
            inter_broker.name,
        )
    return Authorization(settings, image, journal, own_principal=own_principal)
