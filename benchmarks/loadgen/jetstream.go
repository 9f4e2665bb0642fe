package main

// js-steady: the steady load on a NATS JetStream stream (peers.py's jetstream system), from the
// same kind of client as the Kafka-protocol systems get: open loop as `steady`, each message
// published asynchronously (nats.go's PublishAsync) and its latency taken, from its due time,
// when the stream's quorum has acknowledged it.
//
//	loadgen -brokers nats://HOST:PORT js-steady -topic SUBJECT -rate 10000 -seconds 20

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
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

	total := int(rate * seconds)
	latencies := make([]int64, total)
	var errors atomic.Int64
	var firstError atomic.Value
	failed := func(slot int, err error) {
		errors.Add(1)
		firstError.CompareAndSwap(nil, err.Error())
		latencies[slot] = -1
	}
	// The stream acknowledges in order, so one goroutine awaits the futures in publish order.
	acks := make(chan pendingAck, jsMaxPending)
	awaited := make(chan struct{})
	go func() {
		for pending := range acks {
			select {
			case <-pending.future.Ok():
				latencies[pending.slot] = time.Since(pending.due).Microseconds()
			case err := <-pending.future.Err():
				failed(pending.slot, err)
			}
		}
		close(awaited)
	}()

	period := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(50 * time.Millisecond)
	for j := 0; j < total; j++ {
		due := start.Add(time.Duration(j) * period)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		value := make([]byte, recordSize)
		binary.LittleEndian.PutUint64(value, uint64(j))
		future, err := js.PublishAsync(subject, value)
		if err != nil {
			failed(j, err)
			continue
		}
		acks <- pendingAck{future, due, j}
	}
	close(acks)
	<-awaited

	out := result{Count: total, Errors: errors.Load(), WallS: time.Since(start).Seconds()}
	for _, latency := range latencies {
		if latency >= 0 {
			out.LatenciesUs = append(out.LatenciesUs, latency)
		}
	}
	if first, ok := firstError.Load().(string); ok {
		out.FirstError = first
	}
	return out
}
