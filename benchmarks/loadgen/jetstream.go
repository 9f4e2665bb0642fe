package main

// The four measurements of peers.py on a NATS JetStream stream (its jetstream system), from a
// client that costs the machine as little as franz-go costs the Kafka-protocol systems, so that
// the servers, not nats-py, are measured:
//
//	loadgen -brokers nats://HOST:PORT js-batched -topic SUBJECT -count 1000000 -publishers 3
//	loadgen -brokers nats://HOST:PORT js-one -topic SUBJECT -count 2000
//	loadgen -brokers nats://HOST:PORT js-steady -topic SUBJECT -rate 10000 -seconds 20
//	loadgen -brokers nats://HOST:PORT js-e2e -topic SUBJECT -rate 5000 -seconds 10
//
// js-batched: each publisher (its own connection) publishes its share asynchronously with up to
// jsMaxPending acknowledgements outstanding; wall_s runs from the first publish to the last ack.
// js-one: one message at a time, each awaited (acks=all's one-at-a-time counterpart).
// js-steady: open loop as `steady`, each message published asynchronously (nats.go's
// PublishAsync) and its latency taken, from its due time, when the stream's quorum has
// acknowledged it. js-e2e: the same open loop, with an ordered consumer from the stream's end
// in the same process; each latency runs from the message's due time to its delivery.

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// As many acknowledgements outstanding as peers/jetstream.py allows nats-py (its default).
const jsMaxPending = 4000

// A publish waits this long for room among the outstanding acks before it fails, as nats-py's
// waits: a window full under load is the servers' pace, not an error.
var jsRoom = jetstream.WithStallWait(time.Minute)

type pendingAck struct {
	future jetstream.PubAckFuture
	due    time.Time
	slot   int
}

// jsConnect opens a connection and its JetStream context, and publishes one message and awaits
// its ack: the stream's leader is known before any clock starts. Close the connection after.
func jsConnect(ctx context.Context, servers, subject string) (*nats.Conn, jetstream.JetStream) {
	conn, err := nats.Connect(servers)
	if err != nil {
		fail(fmt.Errorf("connect: %w", err))
	}
	js, err := jetstream.New(conn, jetstream.WithPublishAsyncMaxPending(jsMaxPending))
	if err != nil {
		fail(err)
	}
	if _, err := js.Publish(ctx, subject, make([]byte, recordSize)); err != nil {
		fail(fmt.Errorf("warm-up: %w", err))
	}
	return conn, js
}

func jsBatched(servers, subject string, count, publishers int) result {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	streams := make([]jetstream.JetStream, publishers)
	for i := range streams {
		conn, js := jsConnect(ctx, servers, subject)
		defer conn.Close()
		streams[i] = js
	}
	value := make([]byte, recordSize)
	return inParallel(count, publishers, func(i, share int, f *failures) {
		js := streams[i]
		futures := make([]jetstream.PubAckFuture, 0, share)
		for range share {
			future, err := js.PublishAsync(subject, value, jsRoom)
			if err != nil {
				f.add(err)
				continue
			}
			futures = append(futures, future)
		}
		<-js.PublishAsyncComplete()
		for _, future := range futures {
			select {
			case <-future.Ok():
			case err := <-future.Err():
				f.add(err)
			}
		}
	})
}

func jsOne(servers, subject string, count int) result {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	conn, js := jsConnect(ctx, servers, subject)
	defer conn.Close()
	outcome := newTally(count)
	value := make([]byte, recordSize)
	start := time.Now()
	for slot := range count {
		sent := time.Now()
		if _, err := js.Publish(ctx, subject, value); err != nil {
			outcome.failed(slot, err)
			continue
		}
		outcome.latencies[slot] = time.Since(sent).Microseconds()
	}
	return outcome.result(start)
}

func jsE2E(servers, subject string, rate, seconds float64) result {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	conn, js := jsConnect(ctx, servers, subject)
	defer conn.Close()
	stream, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		fail(err)
	}
	consumer, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		fail(fmt.Errorf("consumer: %w", err))
	}

	records := int(rate * seconds)
	period := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(50 * time.Millisecond)
	outcome := newUndelivered(records) // under lock: the consumer writes it until stopped
	var received sync.WaitGroup
	received.Add(records)
	var lock sync.Mutex
	consuming, err := consumer.Consume(func(msg jetstream.Msg) {
		data := msg.Data()
		if len(data) < 8 {
			return // not one of this run's messages
		}
		j := int(binary.LittleEndian.Uint64(data))
		if j >= records {
			return
		}
		latency := time.Since(start.Add(time.Duration(j) * period)).Microseconds()
		lock.Lock()
		first := outcome.latencies[j] < 0
		if first {
			outcome.latencies[j] = latency
		}
		lock.Unlock()
		if first {
			received.Done()
		}
	})
	if err != nil {
		fail(fmt.Errorf("consume: %w", err))
	}
	defer consuming.Stop()

	published := jsPublishOpenLoop(js, subject, records, rate, start)
	<-published
	arrived := make(chan struct{})
	go func() { received.Wait(); close(arrived) }()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
	}
	lock.Lock()
	defer lock.Unlock()
	outcome.undelivered("not delivered within 30 s of the last publish")
	return outcome.result(start)
}

// jsPublishOpenLoop publishes `records` messages asynchronously on the open-loop schedule from
// start; the channel closes when every acknowledgement (or failure) is in.
func jsPublishOpenLoop(js jetstream.JetStream, subject string, records int, rate float64, start time.Time) <-chan struct{} {
	acks := make(chan jetstream.PubAckFuture, jsMaxPending)
	done := make(chan struct{})
	go func() {
		for future := range acks {
			select {
			case <-future.Ok():
			case <-future.Err():
			}
		}
		close(done)
	}()
	openLoop(records, rate, start, func(_ int, _ time.Time, value []byte) {
		if future, err := js.PublishAsync(subject, value, jsRoom); err == nil {
			acks <- future
		}
	})
	close(acks)
	return done
}

func jsSteady(servers, subject string, rate, seconds float64) result {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	conn, js := jsConnect(ctx, servers, subject)
	defer conn.Close()

	outcome := newTally(int(rate * seconds))
	// The stream acknowledges in order, so one goroutine awaits the futures in publish order.
	acks := make(chan pendingAck, jsMaxPending)
	awaited := make(chan struct{})
	go func() {
		for pending := range acks {
			select {
			case <-pending.future.Ok():
				outcome.latencies[pending.slot] = time.Since(pending.due).Microseconds()
			case err := <-pending.future.Err():
				outcome.failed(pending.slot, err)
			}
		}
		close(awaited)
	}()

	start := time.Now().Add(50 * time.Millisecond)
	openLoop(len(outcome.latencies), rate, start, func(slot int, due time.Time, value []byte) {
		future, err := js.PublishAsync(subject, value, jsRoom)
		if err != nil {
			outcome.failed(slot, err)
			return
		}
		acks <- pendingAck{future, due, slot}
	})
	close(acks)
	<-awaited

	return outcome.result(start)
}
