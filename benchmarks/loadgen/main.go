// The small-request load of the benchmarks, from a client that costs the machine little: one Go
// process with franz-go, so that on a 2-core machine the brokers, not the client, are measured.
//
//	loadgen -brokers HOST:PORT steady -topic T -partitions 6 -rate 10000 -seconds 20
//	loadgen -brokers nats://HOST:PORT js-steady -topic SUBJECT -rate 10000 -seconds 20
//	loadgen -brokers HOST:PORT batched -topic T -partitions 6 -count 1000000 -publishers 3
//	loadgen -brokers HOST:PORT one -topic T -count 5000
//	loadgen -brokers HOST:PORT e2e -topic T -partitions 6 -rate 1000 -seconds 20
//	(batched, one and e2e: peers.py's other measurements, in kafka.go; js-batched, js-one and
//	js-e2e: JetStream's, in jetstream.go)
//
// steady: open loop, record j is due at t0 + j/rate and its latency runs from then (not from
// when it was sent) to its acknowledgement, as in the Python producer workers. Each record is
// sent at once (no linger), round-robin over the partitions, without idempotence and with many
// requests in flight per broker, as librdkafka does with linger.ms=0. franz-go puts what is
// ready for one broker in one request, so a request may carry a record of each partition the
// broker leads.
//
// It prints one JSON object: {"latencies_us": [...], "count": N, "errors": E, "wall_s": S}.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

const recordSize = 100

type result struct {
	LatenciesUs []int64 `json:"latencies_us"`
	Count       int     `json:"count"`
	Errors      int64   `json:"errors"`
	WallS       float64 `json:"wall_s"`
	FirstError  string  `json:"first_error,omitempty"`
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap brokers, comma-separated")
	flag.Parse()
	if flag.NArg() < 1 || *brokers == "" {
		fmt.Fprintln(os.Stderr, "usage: loadgen -brokers HOST:PORT steady [flags]")
		os.Exit(2)
	}
	sub := flag.NewFlagSet(flag.Arg(0), flag.ExitOnError)
	topic := sub.String("topic", "", "the topic")
	partitions := sub.Int("partitions", 1, "partitions to warm up (records go round-robin)")
	rate := sub.Float64("rate", 10000, "records per second")
	seconds := sub.Float64("seconds", 20, "how long")
	acks := sub.String("acks", "all", "all, 1 or 0")
	count := sub.Int("count", 1000, "records (batched, one, js-batched, js-one)")
	publishers := sub.Int("publishers", 3, "producers, each with its own client (batched, js-batched)")
	_ = sub.Parse(flag.Args()[1:])

	// jetstream.go: the brokers are NATS servers
	switch flag.Arg(0) {
	case "js-steady":
		emit(jsSteady(*brokers, *topic, *rate, *seconds))
		return
	case "js-batched":
		emit(jsBatched(*brokers, *topic, *count, *publishers))
		return
	case "js-one":
		emit(jsOne(*brokers, *topic, *count))
		return
	case "js-e2e":
		emit(jsE2E(*brokers, *topic, *rate, *seconds))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	seeds := strings.Split(*brokers, ",")
	// kafka.go: the other measurements of peers.py on a Kafka-protocol system
	switch flag.Arg(0) {
	case "steady":
		client := newProducer(seeds, *topic, *acks, eager...)
		defer client.Close()
		warmUp(ctx, client, *partitions)
		emit(steady(ctx, client, *rate, *seconds))
	case "batched":
		emit(batched(ctx, seeds, *topic, *acks, *count, *publishers, *partitions))
	case "one":
		emit(one(ctx, seeds, *topic, *acks, *count))
	case "e2e":
		emit(endToEnd(ctx, seeds, *topic, *acks, *rate, *seconds, *partitions))
	default:
		fail(fmt.Errorf("no command %q", flag.Arg(0)))
	}
}

// eager: each record sent at once (no linger), round-robin over the partitions, without
// idempotence and with many requests in flight per broker, as librdkafka does with linger.ms=0.
var eager = []kgo.Opt{
	kgo.ProducerLinger(0),
	kgo.MaxProduceRequestsInflightPerBroker(1000),
	kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
}

// newProducer is a client producing to topic with the given acks, uncompressed and without
// idempotence (librdkafka's defaults), and the options that make it eager or batching.
func newProducer(seeds []string, topic, acks string, opts ...kgo.Opt) *kgo.Client {
	base := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		// The protocol of Kafka 4.1, the peer Kafka of benchmarks/peers.py, for every system:
		// franz-go would otherwise open with ApiVersions v5 (Kafka 4.4), which Tansu answers by
		// closing the connection instead of with UNSUPPORTED_VERSION.
		kgo.MaxVersions(kversion.V4_1_0()),
		kgo.DefaultProduceTopic(topic),
		kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(requiredAcks(acks)),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
	client, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		fail(err)
	}
	return client
}

// emit writes the result as one JSON object on standard output.
func emit(out result) {
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func requiredAcks(text string) kgo.Acks {
	switch text {
	case "0":
		return kgo.NoAck()
	case "1":
		return kgo.LeaderAck()
	}
	return kgo.AllISRAcks()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}

// warmUp sends one acknowledged record per partition (round-robin reaches each): metadata,
// connections and leaders are settled before the clock starts.
func warmUp(ctx context.Context, client *kgo.Client, partitions int) {
	for i := 0; i < partitions; i++ {
		record := &kgo.Record{Value: make([]byte, recordSize)}
		if err := client.ProduceSync(ctx, record).FirstErr(); err != nil {
			fail(fmt.Errorf("warm-up: %w", err))
		}
	}
}

func steady(ctx context.Context, client *kgo.Client, rate, seconds float64) result {
	outcome := newTally(int(rate * seconds))
	start := time.Now().Add(50 * time.Millisecond)
	openLoop(len(outcome.latencies), rate, start, func(slot int, due time.Time, value []byte) {
		client.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				outcome.failed(slot, err)
				return
			}
			outcome.latencies[slot] = time.Since(due).Microseconds()
		})
	})
	if err := client.Flush(ctx); err != nil {
		fail(fmt.Errorf("flush: %w", err))
	}
	return outcome.result(start)
}

// openLoop calls send for each record when it is due, record j at start + j/rate (open loop: a
// slow acknowledgement does not delay the next send), with j in its value's first 8 bytes.
func openLoop(records int, rate float64, start time.Time, send func(int, time.Time, []byte)) {
	period := time.Duration(float64(time.Second) / rate)
	for j := 0; j < records; j++ {
		due := start.Add(time.Duration(j) * period)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		value := make([]byte, recordSize)
		binary.LittleEndian.PutUint64(value, uint64(j))
		send(j, due, value)
	}
}

// tally collects an open-loop run's outcome: each record's latency (-1: it failed) and errors.
type tally struct {
	failures
	latencies []int64
}

func newTally(records int) *tally {
	return &tally{latencies: make([]int64, records)}
}

// newUndelivered is a tally of an end-to-end run: every record -1, not yet delivered, until
// the consumer gives it its latency.
func newUndelivered(records int) *tally {
	t := newTally(records)
	for slot := range t.latencies {
		t.latencies[slot] = -1
	}
	return t
}

// undelivered counts each record still without a latency as failed: it never arrived.
func (t *tally) undelivered(why string) {
	for slot, latency := range t.latencies {
		if latency < 0 {
			t.failed(slot, fmt.Errorf("record %d %s", slot, why))
		}
	}
}

func (t *tally) failed(slot int, err error) {
	t.add(err)
	t.latencies[slot] = -1
}

// result gives the latencies of the acknowledged records of a run that began at start.
func (t *tally) result(start time.Time) result {
	out := result{Count: len(t.latencies), Errors: t.errors.Load(), WallS: time.Since(start).Seconds()}
	for _, latency := range t.latencies {
		if latency >= 0 {
			out.LatenciesUs = append(out.LatenciesUs, latency)
		}
	}
	out.FirstError = t.first()
	return out
}

// failures counts a run's errors, from any goroutine, and keeps the first one's text.
type failures struct {
	errors     atomic.Int64
	firstError atomic.Value
}

func (f *failures) add(err error) {
	f.errors.Add(1)
	f.firstError.CompareAndSwap(nil, err.Error())
}

func (f *failures) first() string {
	text, _ := f.firstError.Load().(string)
	return text
}

// inParallel splits count among n producers and runs produce(i, share, f) for each at once; its
// result's wall time runs from the start to when the last of them returned.
func inParallel(count, n int, produce func(i, share int, f *failures)) result {
	var f failures
	var done sync.WaitGroup
	start := time.Now()
	for i := range n {
		share := count / n
		if i < count%n {
			share++
		}
		done.Add(1)
		go func() {
			defer done.Done()
			produce(i, share, &f)
		}()
	}
	done.Wait()
	return result{Count: count, Errors: f.errors.Load(), WallS: time.Since(start).Seconds(), FirstError: f.first()}
}
