"""Consumer groups as confluent-kafka's AdminClient reports them: the list, each group's
members and assignment, and its committed offsets. Lag is computed by the model from the
partitions' high watermarks, which the partitions source already has.

Brokers without the group APIs (ListGroups, DescribeGroups, OffsetFetch, FindCoordinator) are
not an error for the dashboard: they have no groups to show.
"""

from __future__ import annotations

import contextlib
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

try:  # confluent-kafka >= 2.0 exports it from the top-level package
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover - depends on the installed client
    from confluent_kafka.admin import ConsumerGroupTopicPartitions  # type: ignore[no-redef]

from rlog.cli.discovery import Settings, client_config
from rlog.cli.tui.snapshot import CommittedOffset, GroupInfo, GroupMember

NO_GROUPS = "no consumer groups"
# librdkafka's answers when the brokers lack the group APIs: "no groups", not a failure.
UNSUPPORTED_CODES = {
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError.INVALID_REQUEST,
}
NOT_COMMITTED = 0  # OffsetFetch answers offsets < 0 for "nothing committed"


class GroupsUnsupported(Exception):
    """The brokers answered that they do not serve the group APIs."""


class GroupsSource:
    """One AdminClient, kept across refreshes (librdkafka reconnects by itself), rebuilt when
    the bootstrap list changes and after a refresh that failed.

    A failed refresh replaces the client because librdkafka's admin client can stay stuck for
    minutes after a coordinator's broker dies (the TUI's own kill key): asked at once, a broker
    whose metadata has not caught up names the dead broker as coordinator; the client caches
    that, and once its metadata no longer lists that broker it never connects to it again, so
    every describe times out locally until the cache expires. A new client asks afresh."""

    def __init__(self, settings: Settings, timeout_s: float) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._client: AdminClient | None = None
        self._bootstrap: str | None = None

    def _admin(self, bootstrap: str) -> AdminClient:
        if self._client is None or bootstrap != self._bootstrap:
            config = client_config(
                self.settings, bootstrap, {"allow.auto.create.topics": "false"}, role="tui"
            )
            self._client = AdminClient(config)
            self._bootstrap = bootstrap
        return self._client

    def fetch(self, bootstrap: str) -> tuple[tuple[GroupInfo, ...], str | None]:
        """(groups, note): the note says why there are none, else None."""
        try:
            groups = self._fetch(self._admin(bootstrap))
        except GroupsUnsupported:
            return (), f"{NO_GROUPS} (the brokers do not serve the group APIs)"
        except (KafkaException, TimeoutError):
            self._client = None  # the next refresh starts over (see the class docstring)
            raise
        return groups, None if groups else NO_GROUPS

    def _fetch(self, admin: AdminClient) -> tuple[GroupInfo, ...]:
        listed = self._wait(admin.list_consumer_groups(request_timeout=self.timeout_s))
        errors = list(getattr(listed, "errors", []) or [])
        valid = list(getattr(listed, "valid", []) or [])
        if not valid and errors and all(_unsupported(e) for e in errors):
            raise GroupsUnsupported()
        ids = sorted(g.group_id for g in valid)
        if not ids:
            return ()
        described = admin.describe_consumer_groups(ids, request_timeout=self.timeout_s)
        groups = []
        for group_id in ids:
            try:
                description = self._wait(described[group_id])
            except GroupsUnsupported:
                description = None
            offsets = self._offsets(admin, group_id)
            groups.append(_group(group_id, description, offsets))
        return tuple(groups)

    def _offsets(self, admin: AdminClient, group_id: str) -> tuple[CommittedOffset, ...]:
        # One group per request: list_consumer_group_offsets accepts exactly one.
        request = [ConsumerGroupTopicPartitions(group_id)]
        try:
            futures = admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)
            answer = self._wait(futures[group_id])
        except GroupsUnsupported:
            return ()
        return tuple(
            CommittedOffset(
                tp.topic, tp.partition, tp.offset if tp.offset >= NOT_COMMITTED else None
            )
            for tp in answer.topic_partitions or ()
        )

    def _wait(self, future: Any) -> Any:
        """A future's result; GroupsUnsupported when the brokers lack the API."""
        try:
            return future.result(timeout=self.timeout_s + 1)
        except KafkaException as error:
            if _unsupported(error):
                raise GroupsUnsupported() from None
            raise

    def close(self) -> None:
        self._client = None  # AdminClient has no close(); dropping it ends its threads


def _unsupported(error: Any) -> bool:
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    return isinstance(error, KafkaError) and error.code() in UNSUPPORTED_CODES


def _group(group_id: str, description: Any, offsets: tuple[CommittedOffset, ...]) -> GroupInfo:
    if description is None:
        return GroupInfo(group_id, "unknown", (), offsets)
    members = []
    for m in description.members or ():
        assignment: tuple[tuple[str, int], ...] = ()
        with contextlib.suppress(AttributeError, TypeError):
            assignment = tuple(
                (tp.topic, tp.partition) for tp in m.assignment.topic_partitions or ()
            )
        members.append(GroupMember(m.member_id, m.client_id or "", m.host or "", assignment))
    state = getattr(description.state, "name", str(description.state)).lower()
    return GroupInfo(group_id, state, tuple(members), offsets)
