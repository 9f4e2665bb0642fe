// Command franz runs franz-go (kgo for producing and consuming, kadm for administration) against
// a Kafka cluster for rlog's interop tests. Each sub-command does one thing and prints JSON
// lines on stdout, which tests/interop/test_franz_go.py reads. Errors the Kafka protocol reports
// per item (per topic, partition or group) are printed in an "error" field, as Kafka's error
// name, so a test can assert them; any other failure exits non-zero with a message on stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A sub-command: it parses its own flags from args and prints its JSON lines itself.
type command func(ctx context.Context, brokers []string, args []string) error

var commands = map[string]command{
	"produce":                 produce,
	"consume":                 consume,
	"member":                  member,
	"create-topic":            createTopic,
	"metadata":                metadata,
	"list-topics":             listTopics,
	"describe-configs":        describeConfigs,
	"alter-configs":           alterConfigs,
	"list-offsets":            listOffsets,
	"describe-group":          describeGroup,
	"describe-consumer-group": describeConsumerGroup,
	"fetch-offsets":           fetchOffsets,
	"delete-group":            deleteGroup,
	"delete-records":          deleteRecords,
	"delete-topic":            deleteTopic,
}

func main() {
	// Usage: franz -brokers HOST:PORT[,...] [-timeout D] SUB-COMMAND [its flags]
	brokers := flag.String("brokers", "", "bootstrap brokers, comma-separated")
	timeout := flag.Duration("timeout", 60*time.Second, "the whole run's deadline")
	flag.Parse()
	if flag.NArg() < 1 || commands[flag.Arg(0)] == nil || *brokers == "" {
		names := make([]string, 0, len(commands))
		for name := range commands {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: franz -brokers HOST:PORT[,...] [-timeout D] {%s} [flags]\n",
			strings.Join(names, "|"))
		os.Exit(2)
	}
	name := flag.Arg(0)
	// A deadline on everything: a test must fail, not hang, when the broker does not answer.
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err := commands[name](ctx, strings.Split(*brokers, ","), flag.Args()[1:])
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "franz %s: %v\n", name, err)
		os.Exit(1)
	}
}

// emitting keeps lines printed from the client's callbacks whole.
var emitting sync.Mutex

// emit prints one JSON line.
func emit(line any) {
	encoded, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	emitting.Lock()
	defer emitting.Unlock()
	fmt.Println(string(encoded))
}

// errorName is "" for no error, Kafka's name for a protocol error (TOPIC_ALREADY_EXISTS), else
// the error's text.
func errorName(err error) string {
	if err == nil {
		return ""
	}
	var kafkaErr *kerr.Error
	if errors.As(err, &kafkaErr) {
		return kafkaErr.Message
	}
	return err.Error()
}

func newClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("rlog-interop-franz")}
	return kgo.NewClient(append(base, opts...)...)
}

func newAdmin(brokers []string) (*kadm.Client, error) {
	client, err := newClient(brokers)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(client), nil
}

// parseFlags parses a sub-command's flags, exiting with a usage message on a bad one.
func parseFlags(flags *flag.FlagSet, args []string) {
	flags.Parse(args)
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flags.Args())
		os.Exit(2)
	}
}

// keyValues is a repeatable -flag k=v.
type keyValues map[string]string

func (kv keyValues) String() string { return fmt.Sprint(map[string]string(kv)) }

func (kv keyValues) Set(text string) error {
	key, value, ok := strings.Cut(text, "=")
	if !ok {
		return fmt.Errorf("%q is not key=value", text)
	}
	kv[key] = value
	return nil
}

// names is a repeatable -flag name.
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Set(text string) error {
	*n = append(*n, text)
	return nil
}

// ---- producing and consuming (kgo) ----

type producedRecord struct {
	Event         string `json:"event"`
	Key           string `json:"key"`
	Value         string `json:"value"`
	Partition     int32  `json:"partition"`
	Offset        int64  `json:"offset"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int16  `json:"producer_epoch"`
	Error         string `json:"error"`
}

// produce writes -count records key-<i>/value-<i> (i from -first), each with the header
// index=<i>, with acks=all and idempotence (kgo's default, kept), and prints each record's
// acknowledgement: its partition, offset and producer id.
func produce(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("produce", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic to write to")
	count := flags.Int("count", 10, "how many records")
	first := flags.Int("first", 0, "the index of the first record")
	parseFlags(flags, args)

	client, err := newClient(brokers, kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer client.Close()
	records := make([]*kgo.Record, 0, *count)
	for i := *first; i < *first+*count; i++ {
		records = append(records, &kgo.Record{
			Topic:   *topic,
			Key:     []byte(fmt.Sprintf("key-%d", i)),
			Value:   []byte(fmt.Sprintf("value-%d", i)),
			Headers: []kgo.RecordHeader{{Key: "index", Value: []byte(strconv.Itoa(i))}},
		})
	}
	// One line per record as its acknowledgement came (partitions answer in any order).
	for _, result := range client.ProduceSync(ctx, records...) {
		record := result.Record
		emit(producedRecord{
			Event: "produced", Key: string(record.Key), Value: string(record.Value),
			Partition: record.Partition, Offset: record.Offset, ProducerID: record.ProducerID,
			ProducerEpoch: record.ProducerEpoch, Error: errorName(result.Err),
		})
	}
	return nil
}

type consumedRecord struct {
	Event     string            `json:"event"`
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
}

type committedOffsets struct {
	Event   string                     `json:"event"`
	Offsets map[string]map[int32]int64 `json:"offsets"`
}

// consume joins -group (the classic protocol; kgo only speaks KIP-848 when asked) with
// autocommit off, reads from the group's committed offsets (or the start) until it has -count
// records, then commits them as -commit says: "records" (CommitRecords with every record read),
// "uncommitted" (CommitUncommittedOffsets) or "none". With -hold it stays in the group until
// its stdin closes, so a test can describe the live group; then it leaves the group.
func consume(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("consume", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic to read")
	group := flags.String("group", "", "the consumer group")
	count := flags.Int("count", 10, "how many records to read")
	commit := flags.String("commit", "records", "records|uncommitted|none")
	hold := flags.Bool("hold", false, "stay in the group until stdin closes")
	parseFlags(flags, args)
	if *commit != "records" && *commit != "uncommitted" && *commit != "none" {
		return fmt.Errorf("-commit %q: want records, uncommitted or none", *commit)
	}

	client, err := newClient(brokers,
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return err
	}
	// Close leaves the group (and, with autocommit off, commits nothing).
	defer client.Close()

	var records []*kgo.Record
	for len(records) < *count {
		fetches := client.PollRecords(ctx, *count-len(records))
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %d of %d records: %w", len(records), *count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		fetches.EachRecord(func(record *kgo.Record) {
			records = append(records, record)
			headers := make(map[string]string, len(record.Headers))
			for _, header := range record.Headers {
				headers[header.Key] = string(header.Value)
			}
			emit(consumedRecord{
				Event: "consumed", Topic: record.Topic, Partition: record.Partition,
				Offset: record.Offset, Key: string(record.Key), Value: string(record.Value),
				Headers: headers,
			})
		})
	}

	switch *commit {
	case "records":
		err = client.CommitRecords(ctx, records...)
	case "uncommitted":
		err = client.CommitUncommittedOffsets(ctx)
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// What the client believes the group has committed, for the test to compare with kadm's.
	offsets := make(map[string]map[int32]int64)
	for topic, partitions := range client.CommittedOffsets() {
		offsets[topic] = make(map[int32]int64)
		for partition, at := range partitions {
			offsets[topic][partition] = at.Offset
		}
	}
	emit(committedOffsets{Event: "committed", Offsets: offsets})

	if *hold {
		// Heartbeats go on in the background while we wait for the test to close stdin.
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("held the group until the deadline: %w", ctx.Err())
		}
	}
	return nil
}

type assignedPartitions struct {
	Event      string  `json:"event"`
	Partitions []int32 `json:"partitions"`
}

// member joins -group under -protocol, "classic" or "consumer" (KIP-848: kgo's
// ServerSideBalancer, the broker assigns the partitions with -assignor, "uniform" or "range"),
// with autocommit off, and reads -topic from the group's commits (or the start) until its stdin
// closes; then it leaves the group. It prints every change of its assignment ("assigned", with
// every partition it owns now), every record ("consumed"), and after each poll's records it
// commits them with CommitRecords ("committed": the offsets it committed), before a rebalance
// may take their partitions away (BlockRebalanceOnPoll).
func member(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("member", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic to read")
	group := flags.String("group", "", "the consumer group")
	protocol := flags.String("protocol", "consumer", "classic|consumer")
	assignor := flags.String("assignor", "uniform", "uniform|range: the broker's assignor")
	parseFlags(flags, args)

	var balancer kgo.GroupBalancer
	switch *assignor {
	case "uniform":
		balancer = kgo.CooperativeStickyBalancer() // kgo asks the broker for "uniform"
	case "range":
		balancer = kgo.RangeBalancer()
	default:
		return fmt.Errorf("-assignor %q: want uniform or range", *assignor)
	}
	var owned sync.Map // partition -> true
	report := func() {
		partitions := []int32{}
		owned.Range(func(key, _ any) bool {
			partitions = append(partitions, key.(int32))
			return true
		})
		sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
		emit(assignedPartitions{Event: "assigned", Partitions: partitions})
	}
	change := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, changed map[string][]int32) {
			for _, partition := range changed[*topic] {
				if add {
					owned.Store(partition, true)
				} else {
					owned.Delete(partition)
				}
			}
			report()
		}
	}
	opts := []kgo.Opt{
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(balancer),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(change(true)),
		kgo.OnPartitionsRevoked(change(false)),
		kgo.OnPartitionsLost(change(false)),
	}
	switch *protocol {
	case "consumer":
		opts = append(opts, kgo.ServerSideBalancer())
	case "classic":
	default:
		return fmt.Errorf("-protocol %q: want classic or consumer", *protocol)
	}
	client, err := newClient(brokers, opts...)
	if err != nil {
		return err
	}
	defer client.Close() // leaves the group

	// Reading stops when stdin closes (or at the deadline, an error).
	reading, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stopReading()
	}()
	for {
		fetches := client.PollRecords(reading, 1000)
		if reading.Err() != nil {
			client.AllowRebalance()
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("read until the deadline: %w", err)
			}
			return nil
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		records := fetches.Records()
		committed := map[int32]int64{}
		for _, record := range records {
			emit(consumedRecord{
				Event: "consumed", Topic: record.Topic, Partition: record.Partition,
				Offset: record.Offset, Key: string(record.Key), Value: string(record.Value),
				Headers: map[string]string{},
			})
			committed[record.Partition] = record.Offset + 1
		}
		if len(records) > 0 {
			if err := client.CommitRecords(ctx, records...); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			emit(committedOffsets{Event: "committed",
				Offsets: map[string]map[int32]int64{*topic: committed}})
		}
		client.AllowRebalance()
	}
}

// ---- administration (kadm) ----

type createdTopic struct {
	Topic             string            `json:"topic"`
	Error             string            `json:"error"`
	NumPartitions     int32             `json:"num_partitions"`
	ReplicationFactor int16             `json:"replication_factor"`
	Configs           map[string]string `json:"configs"`
}

// createTopic creates -topic with -partitions, -replication-factor and any -config k=v.
func createTopic(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("create-topic", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic to create")
	partitions := flags.Int("partitions", 1, "its partitions")
	replicationFactor := flags.Int("replication-factor", -1, "its replication factor")
	configs := keyValues{}
	flags.Var(configs, "config", "a topic config k=v (repeatable)")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	settings := make(map[string]*string, len(configs))
	for key, value := range configs {
		settings[key] = &value
	}
	created, err := admin.CreateTopics(ctx, int32(*partitions), int16(*replicationFactor),
		settings, *topic)
	if err != nil {
		return err
	}
	for _, response := range created.Sorted() {
		values := make(map[string]string, len(response.Configs))
		for key, config := range response.Configs {
			values[key] = config.MaybeValue()
		}
		emit(createdTopic{
			Topic: response.Topic, Error: errorName(response.Err),
			NumPartitions: response.NumPartitions, ReplicationFactor: response.ReplicationFactor,
			Configs: values,
		})
	}
	return nil
}

type brokerJSON struct {
	NodeID int32  `json:"node_id"`
	Host   string `json:"host"`
	Port   int32  `json:"port"`
}

type partitionJSON struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Error       string  `json:"error"`
}

type topicJSON struct {
	Topic      string          `json:"topic"`
	Internal   bool            `json:"internal"`
	Partitions []partitionJSON `json:"partitions"`
	Error      string          `json:"error"`
}

type metadataJSON struct {
	Cluster    string       `json:"cluster"`
	Controller int32        `json:"controller"`
	Brokers    []brokerJSON `json:"brokers"`
	Topics     []topicJSON  `json:"topics"`
}

func topicsJSON(details kadm.TopicDetails) []topicJSON {
	topics := []topicJSON{}
	for _, detail := range details.Sorted() {
		topic := topicJSON{Topic: detail.Topic, Internal: detail.IsInternal,
			Partitions: []partitionJSON{}, Error: errorName(detail.Err)}
		for _, p := range detail.Partitions.Sorted() {
			topic.Partitions = append(topic.Partitions, partitionJSON{
				Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, Error: errorName(p.Err),
			})
		}
		topics = append(topics, topic)
	}
	return topics
}

// metadata prints the cluster's brokers and, for each -topic, its partitions.
func metadata(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("metadata", flag.ExitOnError)
	var topics names
	flags.Var(&topics, "topic", "a topic to describe (repeatable)")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	described, err := admin.Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	result := metadataJSON{Cluster: described.Cluster, Controller: described.Controller,
		Brokers: []brokerJSON{}, Topics: topicsJSON(described.Topics)}
	for _, broker := range described.Brokers {
		result.Brokers = append(result.Brokers,
			brokerJSON{NodeID: broker.NodeID, Host: broker.Host, Port: broker.Port})
	}
	emit(result)
	return nil
}

// listTopics prints every topic that is not internal (kadm's ListTopics without names).
func listTopics(ctx context.Context, brokers []string, args []string) error {
	parseFlags(flag.NewFlagSet("list-topics", flag.ExitOnError), args)
	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	listed, err := admin.ListTopics(ctx)
	if err != nil {
		return err
	}
	emit(map[string]any{"topics": topicsJSON(listed)})
	return nil
}

type configJSON struct {
	Value     *string `json:"value"`
	Source    string  `json:"source"`
	Sensitive bool    `json:"sensitive"`
}

// describeConfigs prints every config of -topic: its value and where it comes from.
func describeConfigs(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("describe-configs", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	described, err := admin.DescribeTopicConfigs(ctx, *topic)
	if err != nil {
		return err
	}
	for _, resource := range described {
		configs := make(map[string]configJSON, len(resource.Configs))
		for _, config := range resource.Configs {
			configs[config.Key] = configJSON{Value: config.Value, Source: config.Source.String(),
				Sensitive: config.Sensitive}
		}
		emit(map[string]any{"name": resource.Name, "error": errorName(resource.Err),
			"configs": configs})
	}
	return nil
}

// alterConfigs changes -topic's configs incrementally (IncrementalAlterConfigs): -set k=v
// sets a key, -delete k removes an override, other keys are left as they are.
func alterConfigs(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("alter-configs", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic")
	sets := keyValues{}
	flags.Var(sets, "set", "a config to set, k=v (repeatable)")
	var deletes names
	flags.Var(&deletes, "delete", "a config override to remove (repeatable)")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	var changes []kadm.AlterConfig
	for key, value := range sets {
		changes = append(changes, kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: &value})
	}
	for _, key := range deletes {
		changes = append(changes, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: key})
	}
	altered, err := admin.AlterTopicConfigs(ctx, changes, *topic)
	if err != nil {
		return err
	}
	for _, response := range altered {
		emit(map[string]any{"name": response.Name, "error": errorName(response.Err),
			"message": response.ErrMessage})
	}
	return nil
}

// partitionOffsets is partition -> offset, or the partition's error if it has one.
func partitionOffsets(listed kadm.ListedOffsets, topic string) (map[int32]int64, error) {
	offsets := make(map[int32]int64)
	for partition, offset := range listed[topic] {
		if offset.Err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", topic, partition, offset.Err)
		}
		offsets[partition] = offset.Offset
	}
	return offsets, nil
}

// listOffsets prints -topic's start (earliest) and end (high watermark) offsets.
func listOffsets(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("list-offsets", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	starts, err := admin.ListStartOffsets(ctx, *topic)
	if err != nil {
		return err
	}
	ends, err := admin.ListEndOffsets(ctx, *topic)
	if err != nil {
		return err
	}
	start, err := partitionOffsets(starts, *topic)
	if err != nil {
		return err
	}
	end, err := partitionOffsets(ends, *topic)
	if err != nil {
		return err
	}
	emit(map[string]any{"start": start, "end": end})
	return nil
}

type memberJSON struct {
	MemberID   string             `json:"member_id"`
	ClientID   string             `json:"client_id"`
	ClientHost string             `json:"client_host"`
	Topics     []string           `json:"subscribed_topics"`
	Assigned   map[string][]int32 `json:"assigned"`
}

// describeGroup prints -group's state, protocol and members with their assignments.
func describeGroup(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("describe-group", flag.ExitOnError)
	group := flags.String("group", "", "the group")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	described, err := admin.DescribeGroups(ctx, *group)
	if err != nil {
		return err
	}
	for _, g := range described.Sorted() {
		members := []memberJSON{}
		for _, m := range g.Members {
			member := memberJSON{MemberID: m.MemberID, ClientID: m.ClientID,
				ClientHost: m.ClientHost, Topics: []string{}, Assigned: map[string][]int32{}}
			if joined, ok := m.Join.AsConsumer(); ok {
				member.Topics = joined.Topics
			}
			if assigned, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range assigned.Topics {
					partitions := append([]int32(nil), t.Partitions...)
					sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
					member.Assigned[t.Topic] = partitions
				}
			}
			members = append(members, member)
		}
		emit(map[string]any{
			"group": g.Group, "error": errorName(g.Err), "state": g.State,
			"protocol_type": g.ProtocolType, "protocol": g.Protocol,
			"coordinator": g.Coordinator.NodeID, "members": members,
		})
	}
	return nil
}

type consumerMemberJSON struct {
	MemberID string             `json:"member_id"`
	Epoch    int32              `json:"member_epoch"`
	ClientID string             `json:"client_id"`
	Topics   []string           `json:"subscribed_topics"`
	Assigned map[string][]int32 `json:"assigned"`
	Target   map[string][]int32 `json:"target"`
}

func sortedSet(set kadm.TopicsSet) map[string][]int32 {
	topics := map[string][]int32{}
	for topic, partitions := range set {
		list := []int32{}
		for partition := range partitions {
			list = append(list, partition)
		}
		sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
		topics[topic] = list
	}
	return topics
}

// describeConsumerGroup prints -group as ConsumerGroupDescribe (KIP-848) answers: its state,
// epochs, assignor and members, each with its epoch and current and target assignments.
func describeConsumerGroup(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("describe-consumer-group", flag.ExitOnError)
	group := flags.String("group", "", "the group")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	described, err := admin.DescribeConsumerGroups(ctx, *group)
	if err != nil && len(described) == 0 {
		return err
	}
	for _, g := range described {
		members := []consumerMemberJSON{}
		for _, m := range g.Members {
			members = append(members, consumerMemberJSON{
				MemberID: m.MemberID, Epoch: m.MemberEpoch, ClientID: m.ClientID,
				Topics:   append([]string{}, m.SubscribedTopics...),
				Assigned: sortedSet(m.Assignment), Target: sortedSet(m.TargetAssignment),
			})
		}
		emit(map[string]any{
			"group": g.Group, "error": errorName(g.Err), "state": g.State, "epoch": g.Epoch,
			"assignment_epoch": g.AssignmentEpoch, "assignor": g.AssignorName,
			"coordinator": g.Coordinator.NodeID, "members": members,
		})
	}
	return nil
}

// fetchOffsets prints -group's committed offsets: topic -> partition -> offset.
func fetchOffsets(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("fetch-offsets", flag.ExitOnError)
	group := flags.String("group", "", "the group")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	fetched, err := admin.FetchOffsets(ctx, *group)
	if err != nil {
		return err
	}
	offsets := make(map[string]map[int32]int64)
	errs := []string{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			errs = append(errs, fmt.Sprintf("%s[%d]: %s", o.Topic, o.Partition, errorName(o.Err)))
			return
		}
		if offsets[o.Topic] == nil {
			offsets[o.Topic] = make(map[int32]int64)
		}
		offsets[o.Topic][o.Partition] = o.At
	})
	emit(map[string]any{"group": *group, "offsets": offsets, "errors": errs})
	return nil
}

// deleteGroup deletes -group (DeleteGroups).
func deleteGroup(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("delete-group", flag.ExitOnError)
	group := flags.String("group", "", "the group")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	deleted, err := admin.DeleteGroups(ctx, *group)
	if err != nil {
		return err
	}
	for _, response := range deleted.Sorted() {
		emit(map[string]any{"group": response.Group, "error": errorName(response.Err)})
	}
	return nil
}

// deleteRecords moves -topic's log start offsets: -offset P=O for each partition (-1: its
// high watermark), and prints each partition's new low watermark.
func deleteRecords(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("delete-records", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic")
	before := keyValues{}
	flags.Var(before, "offset", "partition=offset: delete the records before offset (repeatable)")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	offsets := make(kadm.Offsets)
	for partitionText, offsetText := range before {
		partition, err := strconv.ParseInt(partitionText, 10, 32)
		if err != nil {
			return fmt.Errorf("partition %q: %w", partitionText, err)
		}
		offset, err := strconv.ParseInt(offsetText, 10, 64)
		if err != nil {
			return fmt.Errorf("offset %q: %w", offsetText, err)
		}
		offsets.AddOffset(*topic, int32(partition), offset, -1)
	}
	deleted, err := admin.DeleteRecords(ctx, offsets)
	if err != nil {
		return err
	}
	for _, response := range deleted.Sorted() {
		emit(map[string]any{"topic": response.Topic, "partition": response.Partition,
			"low_watermark": response.LowWatermark, "error": errorName(response.Err)})
	}
	return nil
}

// deleteTopic deletes -topic (DeleteTopics).
func deleteTopic(ctx context.Context, brokers []string, args []string) error {
	flags := flag.NewFlagSet("delete-topic", flag.ExitOnError)
	topic := flags.String("topic", "", "the topic")
	parseFlags(flags, args)

	admin, err := newAdmin(brokers)
	if err != nil {
		return err
	}
	defer admin.Close()
	deleted, err := admin.DeleteTopics(ctx, *topic)
	if err != nil {
		return err
	}
	for _, response := range deleted.Sorted() {
		emit(map[string]any{"topic": response.Topic, "error": errorName(response.Err)})
	}
	return nil
}
