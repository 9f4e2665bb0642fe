"""The cluster metadata a fold of metadata records gives: brokers, topics, partitions, configs.

The controller and every broker build it the same way, record by record, with `apply`. A record
that would make an impossible state (a partition epoch going back, a leader outside the ISR, a
fenced leader) is a bug in whoever wrote the log, so it fails an assertion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from rlog.core.metadata.records import (
    NO_LEADER,
    AccessControlEntry,
    AllocateProducerIds,
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    Endpoint,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
)
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    validate_binding,
)
from rlog.core.security.scram import ScramCredential, ScramMechanism

CONFIG_RESOURCE_TYPES = ("topic", "broker", "cluster")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    epoch: int  # the offset of its RegisterBroker record
    incarnation_id: str
    host: str  # host and port: the listener its peers use (inter.broker.listener.name)
    port: int
    rack: str | None
    fenced: bool
    listeners: tuple[Endpoint, ...] = ()

    def endpoint(self, listener: str) -> Endpoint | None:
        """Where clients of `listener` reach this broker (None: it has no such listener, and
        Kafka leaves it out of answers given on that listener). A broker registered without
        listeners has one, PLAINTEXT, at host:port."""
        for endpoint in self.listeners or (_plaintext(self.host, self.port),):
            if endpoint.name == listener:
                return endpoint
        return None


def _plaintext(host: str, port: int) -> Endpoint:
    return Endpoint("PLAINTEXT", host, port, "PLAINTEXT")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # NO_LEADER when offline
    leader_epoch: int
    partition_epoch: int
    # Leaderless after its last ISR member restarted uncleanly: see ChangePartition.recovering.
    recovering: bool = False

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: str
    configs: dict[str, str]
    partitions: dict[int, PartitionInfo]


TopicPartition = tuple[str, int]


class MetadataImage:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_names_by_id: dict[str, str] = {}
        self.cluster_configs: dict[str, str] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.next_producer_id = 0
        self.topics_created = 0  # every CreateTopic ever: placement derives its start from it
        self.last_offset = -1  # offset of the last record applied
        # ACLs by id, and the same bindings indexed for decisions (DescribeAcls and DeleteAcls
        # use `authorizer.matching`). The request path sets its `super_users` and
        # `allow_if_no_acl` (settings, not metadata) on it.
        self.acls: dict[str, AclBinding] = {}
        self.acl_ids: dict[AclBinding, str] = {}
        self.authorizer = Authorizer()
        # SCRAM credentials: (user, mechanism) -> what the server checks proofs with.
        self.scram_credentials: dict[tuple[str, ScramMechanism], ScramCredential] = {}

    # ---- folding ----

    def apply(self, offset: int, record: MetadataRecord) -> None:
        assert offset > self.last_offset, f"record offset {offset} after {self.last_offset}"
        _APPLY[type(record)](self, offset, record)
        self.last_offset = offset

    def _register_broker(self, offset: int, record: RegisterBroker) -> None:
        assert record.broker_epoch == offset, "a broker's epoch is its registration's offset"
        self.brokers[record.broker_id] = BrokerInfo(
            record.broker_id,
            record.broker_epoch,
            record.incarnation_id,
            record.host,
            record.port,
            record.rack,
            fenced=True,
            listeners=record.listeners,
        )

    def _fence_broker(self, offset: int, record: FenceBroker) -> None:
        broker = self._broker_at_epoch(record.broker_id, record.broker_epoch)
        assert not broker.fenced, f"broker {broker.broker_id} fenced twice"
        self.brokers[broker.broker_id] = replace(broker, fenced=True)

    def _unfence_broker(self, offset: int, record: UnfenceBroker) -> None:
        broker = self._broker_at_epoch(record.broker_id, record.broker_epoch)
        assert broker.fenced, f"broker {broker.broker_id} unfenced twice"
        self.brokers[broker.broker_id] = replace(broker, fenced=False)

    def _broker_at_epoch(self, broker_id: int, broker_epoch: int) -> BrokerInfo:
        broker = self.brokers.get(broker_id)
        assert broker is not None, f"broker {broker_id} is not registered"
        assert broker.epoch == broker_epoch, f"broker {broker_id}: epoch {broker_epoch} is stale"
        return broker

    def _create_topic(self, offset: int, record: CreateTopic) -> None:
        assert record.name not in self.topics, f"topic {record.name} exists"
        assert record.topic_id not in self.topic_names_by_id, f"topic id {record.topic_id} reused"
        self.topics[record.name] = TopicInfo(record.name, record.topic_id, dict(record.configs), {})
        self.topic_names_by_id[record.topic_id] = record.name
        self.topics_created += 1

    def _create_partition(self, offset: int, record: CreatePartition) -> None:
        topic = self.topics.get(record.topic)
        assert topic is not None, f"partition of unknown topic {record.topic}"
        assert record.partition == len(topic.partitions), "partitions are created in order"
        assert record.leader_epoch >= 0 and record.partition_epoch >= 0
        state = PartitionInfo(
            record.replicas, record.isr, record.leader, record.leader_epoch, record.partition_epoch
        )
        self._check_partition(record.topic, record.partition, state)
        topic.partitions[record.partition] = state

    def _change_partition(self, offset: int, record: ChangePartition) -> None:
        topic = self.topics.get(record.topic)
        old = topic.partitions.get(record.partition) if topic is not None else None
        assert topic is not None and old is not None, f"{record.topic}-{record.partition} unknown"
        where = f"{record.topic}-{record.partition}"
        assert record.partition_epoch > old.partition_epoch, f"{where}: partition epoch went back"
        leader = old.leader if record.leader is None else record.leader
        if leader == old.leader:
            assert record.leader_epoch >= old.leader_epoch, f"{where}: leader epoch went back"
        else:
            assert record.leader_epoch > old.leader_epoch, f"{where}: new leader, same epoch"
        isr = old.isr if record.isr is None else record.isr
        assert not record.unclean or isr == (leader,), f"{where}: unclean leader not sole ISR"
        recovering = old.recovering if record.recovering is None else record.recovering
        state = PartitionInfo(
            old.replicas, isr, leader, record.leader_epoch, record.partition_epoch, recovering
        )
        self._check_partition(record.topic, record.partition, state)
        topic.partitions[record.partition] = state

    def _check_partition(self, topic: str, partition: int, state: PartitionInfo) -> None:
        where = f"{topic}-{partition}"
        assert state.replicas and len(set(state.replicas)) == len(state.replicas), where
        assert state.isr and len(set(state.isr)) == len(state.isr), f"{where}: ISR {state.isr}"
        assert set(state.isr) <= set(state.replicas), f"{where}: ISR outside replicas"
        assert all(member in self.brokers for member in state.isr), f"{where}: ISR unregistered"
        assert not state.recovering or state.leader == NO_LEADER, f"{where}: recovering, led"
        if state.leader != NO_LEADER:
            assert state.leader in state.isr, f"{where}: leader {state.leader} not in ISR"
            assert not self.brokers[state.leader].fenced, f"{where}: fenced leader"

    def _delete_topic(self, offset: int, record: DeleteTopic) -> None:
        topic = self.topics.pop(record.name, None)
        assert topic is not None, f"deleting unknown topic {record.name}"
        del self.topic_names_by_id[topic.topic_id]

    def _change_config(self, offset: int, record: ChangeConfig) -> None:
        assert record.resource_type in CONFIG_RESOURCE_TYPES, record.resource_type
        if record.resource_type == "topic":
            assert record.name in self.topics, f"config of unknown topic {record.name}"
            configs = self.topics[record.name].configs
        elif record.resource_type == "broker":
            configs = self.broker_configs.setdefault(record.name, {})
        else:
            assert record.name == "", "the cluster resource has an empty name"
            configs = self.cluster_configs
        if record.value is None:
            configs.pop(record.key, None)
        else:
            configs[record.key] = record.value

    def _allocate_producer_ids(self, offset: int, record: AllocateProducerIds) -> None:
        self._broker_at_epoch(record.broker_id, record.broker_epoch)
        assert record.next_producer_id > self.next_producer_id, "producer ids went back"
        self.next_producer_id = record.next_producer_id

    def _access_control_entry(self, offset: int, record: AccessControlEntry) -> None:
        binding = AclBinding(
            ResourceType.from_code(record.resource_type),
            record.resource_name,
            PatternType.from_code(record.pattern_type),
            record.principal,
            record.host,
            AclOperation.from_code(record.operation),
            AclPermissionType.from_code(record.permission),
        )
        assert record.acl_id not in self.acls, f"ACL id {record.acl_id} reused"
        assert binding not in self.acl_ids, f"ACL stored twice: {binding}"
        error, problem = validate_binding(binding)
        assert error == ErrorCode.NONE, f"invalid ACL {binding}: {problem}"
        self.authorizer.add(binding)
        self.acls[record.acl_id] = binding
        self.acl_ids[binding] = record.acl_id

    def _remove_access_control_entry(self, offset: int, record: RemoveAccessControlEntry) -> None:
        binding = self.acls.pop(record.acl_id, None)
        assert binding is not None, f"removing unknown ACL {record.acl_id}"
        del self.acl_ids[binding]
        self.authorizer.remove(binding)

    def _user_scram_credential(self, offset: int, record: UserScramCredential) -> None:
        assert record.name, "a SCRAM credential without a user name"
        credential = record.credential()  # ValueError for a bad mechanism or base64
        self.scram_credentials[(record.name, credential.mechanism)] = credential

    def _remove_user_scram_credential(self, offset: int, record: RemoveUserScramCredential) -> None:
        mechanism = ScramMechanism.from_code(record.mechanism)
        assert mechanism is not None, f"unknown SCRAM mechanism {record.mechanism}"
        removed = self.scram_credentials.pop((record.name, mechanism), None)
        assert removed is not None, f"removing unknown SCRAM credential of {record.name}"

    # ---- queries ----

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return info.partitions.get(partition) if info is not None else None

    def iter_partitions(self) -> Iterator[tuple[str, int, PartitionInfo]]:
        """(topic, partition, state) of every partition, topics by name, partitions in order."""
        for name in sorted(self.topics):
            partitions = self.topics[name].partitions
            for index in sorted(partitions):
                yield name, index, partitions[index]

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return [(t, p) for t, p, state in self.iter_partitions() if state.leader == broker_id]

    def live_brokers(self) -> list[BrokerInfo]:
        """Registered, unfenced brokers by id."""
        return [self.brokers[i] for i in sorted(self.brokers) if not self.brokers[i].fenced]

    def is_live(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def topic_config(self, topic: str, key: str, default: str) -> str:
        """The topic's override, else the cluster's dynamic default, else `default`."""
        info = self.topics.get(topic)
        if info is not None and key in info.configs:
            return info.configs[key]
        return self.cluster_configs.get(key, default)

    # ---- copies and comparison ----

    def copy(self) -> MetadataImage:
        other = MetadataImage()
        other.brokers = dict(self.brokers)
        other.topics = {
            name: TopicInfo(name, t.topic_id, dict(t.configs), dict(t.partitions))
            for name, t in self.topics.items()
        }
        other.topic_names_by_id = dict(self.topic_names_by_id)
        other.cluster_configs = dict(self.cluster_configs)
        other.broker_configs = {name: dict(c) for name, c in self.broker_configs.items()}
        other.next_producer_id = self.next_producer_id
        other.topics_created = self.topics_created
        other.last_offset = self.last_offset
        other.acls = dict(self.acls)
        other.acl_ids = dict(self.acl_ids)
        other.authorizer = Authorizer(
            self.acls.values(),
            super_users=self.authorizer.super_users,
            allow_if_no_acl=self.authorizer.allow_if_no_acl,
        )
        other.scram_credentials = dict(self.scram_credentials)
        return other

    def _state(self) -> tuple[Any, ...]:
        return (
            self.brokers,
            self.topics,
            self.cluster_configs,
            self.broker_configs,
            self.next_producer_id,
            self.topics_created,
            self.last_offset,
            self.acls,
            self.scram_credentials,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetadataImage) and self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"MetadataImage(last_offset={self.last_offset}, brokers={len(self.brokers)}, "
            f"topics={len(self.topics)})"
        )


_APPLY: dict[type, Callable[[MetadataImage, int, Any], None]] = {
    RegisterBroker: MetadataImage._register_broker,
    FenceBroker: MetadataImage._fence_broker,
    UnfenceBroker: MetadataImage._unfence_broker,
    CreateTopic: MetadataImage._create_topic,
    CreatePartition: MetadataImage._create_partition,
    ChangePartition: MetadataImage._change_partition,
    DeleteTopic: MetadataImage._delete_topic,
    ChangeConfig: MetadataImage._change_config,
    AllocateProducerIds: MetadataImage._allocate_producer_ids,
    AccessControlEntry: MetadataImage._access_control_entry,
    RemoveAccessControlEntry: MetadataImage._remove_access_control_entry,
    UserScramCredential: MetadataImage._user_scram_credential,
    RemoveUserScramCredential: MetadataImage._remove_user_scram_credential,
}
