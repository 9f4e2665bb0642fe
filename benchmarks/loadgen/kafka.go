package main

// The measurements of peers.py besides the steady load, on a Kafka-protocol system, with the
// settings its confluent-kafka runs use (peers/workload.py), from franz-go:
//
// batched: each producer (its own client) produces its share as fast as it can, linger 5 ms,
// batches up to 1 MB, up to 1,000,000 records buffered; wall_s runs from the first record to
// the last acknowledgement. one: one record in flight, each acknowledgement awaited, on a
// 1-partition topic. e2e: the steady open loop, and a consumer in the same process reading every
// partition from its start with fetch.wait.max.ms 100 (confluent's CONSUMER_PROPS); each
// latency runs from the record's due time to when the consumer has it.

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

func batched(ctx context.Context, seeds []string, topic, acks string, count, producers, partitions int) result {
	clients := make([]*kgo.Client, producers)
	for i := range clients {
		clients[i] = newProducer(seeds, topic, acks,
			kgo.ProducerLinger(5*time.Millisecond),
			kgo.ProducerBatchMaxBytes(1_000_000),
			kgo.MaxBufferedRecords(1_000_000),
			kgo.MaxProduceRequestsInflightPerBroker(1000),
		)
		defer clients[i].Close()
		warmUp(ctx, clients[i], partitions)
	}
	value := make([]byte, recordSize)
	return inParallel(count, producers, func(i, share int, f *failures) {
		client := clients[i]
		for range share {
			client.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					f.add(err)
				}
			})
		}
		if err := client.Flush(ctx); err != nil {
			fail(fmt.Errorf("flush: %w", err))
		}
	})
}

func one(ctx context.Context, seeds []string, topic, acks string, count int) result {
	client := newProducer(seeds, topic, acks, eager...)
	defer client.Close()
	warmUp(ctx, client, 1)
	outcome := newTally(count)
	start := time.Now()
	for slot := range count {
		sent := time.Now()
		if err := client.ProduceSync(ctx, &kgo.Record{Value: make([]byte, recordSize)}).FirstErr(); err != nil {
			outcome.failed(slot, err)
			continue
		}
		outcome.latencies[slot] = time.Since(sent).Microseconds()
	}
	return outcome.result(start)
}

func endToEnd(ctx context.Context, seeds []string, topic, acks string, rate, seconds float64, partitions int) result {
	producer := newProducer(seeds, topic, acks, eager...)
	defer producer.Close()
	warmUp(ctx, producer, partitions)

	records := int(rate * seconds)
	period := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(500 * time.Millisecond) // the consumer's first fetches are out by then
	// This run's records carry its start time after their index: the warm-up's and any earlier
	// run's records in the topic are not counted.
	run := uint64(start.UnixNano())
	outcome := newUndelivered(records) // written by the consumer until `consumed` closes
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.MaxVersions(kversion.V4_1_0()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		fail(err)
	}
	defer consumer.Close()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		seen := 0
		deadline := start.Add(time.Duration(seconds*float64(time.Second)) + 30*time.Second)
		for seen < records && time.Now().Before(deadline) {
			pollCtx, cancel := context.WithDeadline(ctx, deadline)
			fetches := consumer.PollFetches(pollCtx)
			cancel()
			now := time.Now()
			fetches.EachRecord(func(record *kgo.Record) {
				if len(record.Value) < 16 || binary.LittleEndian.Uint64(record.Value[8:]) != run {
					return
				}
				j := int(binary.LittleEndian.Uint64(record.Value))
				if j < records && outcome.latencies[j] < 0 {
					outcome.latencies[j] = now.Sub(start.Add(time.Duration(j) * period)).Microseconds()
					seen++
				}
			})
		}
	}()

	openLoop(records, rate, start, func(_ int, _ time.Time, value []byte) {
		binary.LittleEndian.PutUint64(value[8:], run)
		producer.Produce(ctx, &kgo.Record{Value: value}, nil)
	})
	if err := producer.Flush(ctx); err != nil {
		fail(fmt.Errorf("flush: %w", err))
	}
	<-consumed
	outcome.undelivered("not consumed within 30 s of the last send")
	return outcome.result(start)
}
