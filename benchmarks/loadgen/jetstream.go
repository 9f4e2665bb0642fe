package main

// js-steady: the steady load on a NATS JetStream stream (peers.py's jetstream system), from the
// same kind of client as the Kafka-protocol systems get: open loop as `steady`, each message
// published asynchronously (nats.go's PublishAsync) and its latency taken, from its due time,
// when the stream's quorum has acknowledged it.
//
//	loadgen -brokers nats://HOST:PORT js-steady -topic SUBJECT -rate 10000 -seconds 20

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// As many acknowledgements outstanding as peers/jetstream.py allows nats-py (its default).
const jsMaxPending = 4000

type pendingAck struct {
	future jetstream.PubAckFuture
	due    time.Time
	slot   int
}

func jsSteady(servers, subject string, rate, seconds float64) result {
	conn, err := nats.Connect(servers)
	if err != nil {
		fail(fmt.Errorf("connect: %w", err))
	}
	defer conn.Close()
	js, err := jetstream.New(conn, jetstream.WithPublishAsyncMaxPending(jsMaxPending))
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := js.Publish(ctx, subject, make([]byte, recordSize)); err != nil {
		fail(fmt.Errorf("warm-up: %w", err))
	}

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
		future, err := js.PublishAsync(subject, value)
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
