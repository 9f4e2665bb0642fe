#!/usr/bin/env node
// kafkajs (the version package.json pins) run against a Kafka cluster for rlog's interop tests.
//
//   node client.js SUB-COMMAND --brokers HOST:PORT[,...] [--timeout-ms N] [its options]
//
// Each sub-command does one thing and prints JSON lines on stdout, which
// tests/interop/test_kafkajs.py reads. A failure prints one line {"event": "error", ...} with
// kafkajs' error name, Kafka's error type and the per-item causes, and exits 1, so a test can
// assert the error as well as the success. kafkajs' own log lines go to stderr.
// `require('kafkajs')` is found through NODE_PATH: the package is installed in the test cache.
'use strict'

const { parseArgs } = require('node:util')
const {
  AssignerProtocol,
  ConfigResourceTypes,
  Kafka,
  logLevel,
  Partitioners,
} = require('kafkajs')

const OPTIONS = {
  brokers: { type: 'string' },
  'timeout-ms': { type: 'string', default: '60000' },
  topic: { type: 'string' },
  group: { type: 'string' },
  count: { type: 'string', default: '10' },
  first: { type: 'string', default: '0' },
  partitions: { type: 'string', default: '1' },
  'replication-factor': { type: 'string', default: '-1' },
  config: { type: 'string', multiple: true, default: [] },
  set: { type: 'string', multiple: true, default: [] },
  offset: { type: 'string', multiple: true, default: [] },
  mode: { type: 'string', default: 'message' },
  timestamp: { type: 'string' },
  earliest: { type: 'boolean', default: false },
  hold: { type: 'boolean', default: false },
}

function emit(line) {
  // stdout is a pipe, and writes to pipes are synchronous on Linux: nothing is lost on exit.
  process.stdout.write(JSON.stringify(line) + '\n')
}

// "k=v" options as [key, value] pairs.
function pairs(texts) {
  return texts.map(text => {
    const at = text.indexOf('=')
    if (at < 0) throw new Error(`${text} is not key=value`)
    return [text.slice(0, at), text.slice(at + 1)]
  })
}

function required(options, name) {
  if (!options[name]) throw new Error(`--${name} is required`)
  return options[name]
}

// kafkajs logs to the console (stdout) by default: as JSON lines on stderr instead.
function stderrLogCreator() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(JSON.stringify({ level: label, namespace, message, ...extra }) + '\n')
  }
}

function newKafka(options) {
  return new Kafka({
    clientId: 'rlog-interop-kafkajs',
    brokers: required(options, 'brokers').split(','),
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    // Fail within the test's time: a few quick retries, not kafkajs' default minute and more.
    retry: { initialRetryTime: 100, retries: 5 },
  })
}

// An admin client, connected; `use` runs with it and the client is always disconnected.
async function withAdmin(options, use) {
  const admin = newKafka(options).admin()
  await admin.connect()
  try {
    return await use(admin)
  } finally {
    await admin.disconnect()
  }
}

// Resolves when stdin closes: a held consumer stays in its group until the test says so.
function stdinClosed() {
  return new Promise(resolve => {
    process.stdin.on('end', resolve)
    process.stdin.on('close', resolve)
    process.stdin.resume()
  })
}

// ---- producing and consuming ----

// Writes --count records key-<i>/value-<i> (i from --first) with the header index=<i>, each in
// its own send with acks -1 from an idempotent producer, and prints each record's offset.
async function produce(options) {
  const topic = required(options, 'topic')
  const producer = newKafka(options).producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
    // The idempotent producer insists on unlimited retries; the process timeout bounds them.
    retry: { initialRetryTime: 100, retries: Number.MAX_SAFE_INTEGER },
  })
  await producer.connect()
  try {
    const first = Number(options.first)
    for (let i = first; i < first + Number(options.count); i++) {
      const [metadata] = await producer.send({
        topic,
        acks: -1,
        messages: [{ key: `key-${i}`, value: `value-${i}`, headers: { index: String(i) } }],
      })
      emit({
        event: 'produced',
        key: `key-${i}`,
        value: `value-${i}`,
        partition: metadata.partition,
        offset: Number(metadata.baseOffset),
        error_code: metadata.errorCode,
      })
    }
  } finally {
    await producer.disconnect()
  }
}

// Joins --group with autoCommit false, reads --topic from the group's offsets (or the start)
// until it has --count records and commits with commitOffsets: after each record
// (--mode message, eachMessage) or after each batch (--mode batch, eachBatch). With --hold it
// stays in the group until stdin closes, so a test can describe the live group.
async function consume(options) {
  const topic = required(options, 'topic')
  const count = Number(options.count)
  const consumer = newKafka(options).consumer({
    groupId: required(options, 'group'),
    maxWaitTimeInMs: 500,
    sessionTimeout: 30000,
    heartbeatInterval: 1000,
  })
  let consumed = 0
  let allRead
  const done = new Promise(resolve => (allRead = resolve))
  const record = (partition, message) => {
    consumed += 1
    const headers = {}
    for (const [key, value] of Object.entries(message.headers || {})) {
      headers[key] = value === undefined || value === null ? null : value.toString()
    }
    emit({
      event: 'consumed',
      topic,
      partition,
      offset: Number(message.offset),
      key: message.key === null ? null : message.key.toString(),
      value: message.value === null ? null : message.value.toString(),
      headers,
    })
  }
  const commit = async (partition, offset) => {
    // The offset committed is the next one to read, as Kafka's clients commit it.
    const next = (BigInt(offset) + 1n).toString()
    await consumer.commitOffsets([{ topic, partition, offset: next }])
    emit({ event: 'committed', topic, partition, offset: Number(next) })
  }

  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    if (options.mode === 'message') {
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (consumed >= count) return
          record(partition, message)
          await commit(partition, message.offset)
          if (consumed >= count) allRead()
        },
      })
    } else if (options.mode === 'batch') {
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
          let last = null
          for (const message of batch.messages) {
            if (consumed >= count) break
            record(batch.partition, message)
            resolveOffset(message.offset)
            last = message.offset
          }
          if (last !== null) await commit(batch.partition, last)
          await heartbeat()
          if (consumed >= count) allRead()
        },
      })
    } else {
      throw new Error(`--mode ${options.mode}: want message or batch`)
    }
    await done
    if (options.hold) {
      emit({ event: 'holding' })
      await stdinClosed()
    }
  } finally {
    // Leaves the group; with autoCommit false, commits nothing more.
    await consumer.disconnect()
  }
}

// ---- administration ----

async function createTopic(options) {
  const topic = required(options, 'topic')
  const created = await withAdmin(options, admin =>
    admin.createTopics({
      waitForLeaders: true,
      topics: [
        {
          topic,
          numPartitions: Number(options.partitions),
          replicationFactor: Number(options['replication-factor']),
          configEntries: pairs(options.config).map(([name, value]) => ({ name, value })),
        },
      ],
    })
  )
  emit({ topic, created })
}

// The cluster's brokers (describeCluster) and --topic's partitions (fetchTopicMetadata).
async function metadata(options) {
  const topic = required(options, 'topic')
  await withAdmin(options, async admin => {
    const cluster = await admin.describeCluster()
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
    emit({
      cluster_id: cluster.clusterId,
      controller: cluster.controller,
      brokers: cluster.brokers
        .map(({ nodeId, host, port }) => ({ node_id: nodeId, host, port }))
        .sort((a, b) => a.node_id - b.node_id),
      topics: topics.map(t => ({
        topic: t.name,
        partitions: t.partitions
          .map(p => ({
            partition: p.partitionId,
            leader: p.leader,
            replicas: p.replicas,
            isr: p.isr,
            error_code: p.partitionErrorCode,
          }))
          .sort((a, b) => a.partition - b.partition),
      })),
    })
  })
}

async function listTopics(options) {
  const topics = await withAdmin(options, admin => admin.listTopics())
  emit({ topics: topics.sort() })
}

// --topic's low and high watermarks per partition (fetchTopicOffsets) or, with --timestamp, the
// first offset at or after that time (fetchTopicOffsetsByTimestamp).
async function topicOffsets(options) {
  const topic = required(options, 'topic')
  await withAdmin(options, async admin => {
    if (options.timestamp !== undefined) {
      const offsets = await admin.fetchTopicOffsetsByTimestamp(topic, Number(options.timestamp))
      for (const { partition, offset } of offsets) {
        emit({ partition, offset: Number(offset) })
      }
      return
    }
    for (const { partition, low, high } of await admin.fetchTopicOffsets(topic)) {
      emit({ partition, low: Number(low), high: Number(high) })
    }
  })
}

async function describeConfigs(options) {
  const topic = required(options, 'topic')
  const described = await withAdmin(options, admin =>
    admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
    })
  )
  for (const resource of described.resources) {
    const configs = {}
    for (const entry of resource.configEntries) {
      configs[entry.configName] = {
        value: entry.configValue,
        is_default: entry.isDefault,
        source: entry.configSource,
        sensitive: entry.isSensitive,
        read_only: entry.readOnly,
      }
    }
    emit({ name: resource.resourceName, error_code: resource.errorCode, configs })
  }
}

// alterConfigs: the legacy AlterConfigs API, which replaces the topic's whole set of overrides
// with the --set pairs given.
async function alterConfigs(options) {
  const topic = required(options, 'topic')
  const altered = await withAdmin(options, admin =>
    admin.alterConfigs({
      validateOnly: false,
      resources: [
        {
          type: ConfigResourceTypes.TOPIC,
          name: topic,
          configEntries: pairs(options.set).map(([name, value]) => ({ name, value })),
        },
      ],
    })
  )
  for (const resource of altered.resources) {
    emit({
      name: resource.resourceName,
      error_code: resource.errorCode,
      error_message: resource.errorMessage,
    })
  }
}

// deleteTopicRecords: --offset P=O deletes partition P's records before offset O (-1: all).
async function deleteRecords(options) {
  const topic = required(options, 'topic')
  const partitions = pairs(options.offset).map(([partition, offset]) => ({
    partition: Number(partition),
    offset,
  }))
  await withAdmin(options, async admin => {
    // deleteTopicRecords finds the leaders in metadata it does not load itself
    // (KafkaJSTopicMetadataNotLoaded otherwise): load it first.
    await admin.fetchTopicMetadata({ topics: [topic] })
    await admin.deleteTopicRecords({ topic, partitions })
  })
  emit({ topic, deleted: partitions })
}

// The group's committed offsets on --topic (-1: none). resetOffsets commits -2 (earliest) or -1
// (latest), which kafkajs' consumers resolve to a watermark when they start.
async function fetchOffsets(options) {
  const groupId = required(options, 'group')
  const topic = required(options, 'topic')
  const fetched = await withAdmin(options, admin => admin.fetchOffsets({ groupId, topics: [topic] }))
  for (const { topic: name, partitions } of fetched) {
    for (const { partition, offset } of partitions.sort((a, b) => a.partition - b.partition)) {
      emit({ topic: name, partition, offset: Number(offset) })
    }
  }
}

// resetOffsets: the group's offsets on --topic to the earliest (--earliest) or latest.
async function resetOffsets(options) {
  const groupId = required(options, 'group')
  const topic = required(options, 'topic')
  await withAdmin(options, admin => admin.resetOffsets({ groupId, topic, earliest: options.earliest }))
  emit({ group: groupId, topic, reset: options.earliest ? 'earliest' : 'latest' })
}

async function describeGroup(options) {
  const groupId = required(options, 'group')
  const { groups } = await withAdmin(options, admin => admin.describeGroups([groupId]))
  for (const group of groups) {
    emit({
      group: group.groupId,
      error_code: group.errorCode,
      state: group.state,
      protocol_type: group.protocolType,
      protocol: group.protocol,
      members: group.members.map(member => {
        const decoded = member.memberAssignment.length
          ? AssignerProtocol.MemberAssignment.decode(member.memberAssignment)
          : null
        const assigned = {}
        for (const [topic, partitions] of Object.entries(decoded ? decoded.assignment : {})) {
          assigned[topic] = [...partitions].sort((a, b) => a - b)
        }
        return {
          member_id: member.memberId,
          client_id: member.clientId,
          client_host: member.clientHost,
          assigned,
        }
      }),
    })
  }
}

async function deleteGroup(options) {
  const groupId = required(options, 'group')
  const results = await withAdmin(options, admin => admin.deleteGroups([groupId]))
  for (const { groupId: group, errorCode } of results) {
    emit({ group, error_code: errorCode })
  }
}

async function deleteTopic(options) {
  const topic = required(options, 'topic')
  await withAdmin(options, admin => admin.deleteTopics({ topics: [topic], timeout: 30000 }))
  emit({ topic, deleted: true })
}

const COMMANDS = {
  produce,
  consume,
  'create-topic': createTopic,
  metadata,
  'list-topics': listTopics,
  'topic-offsets': topicOffsets,
  'describe-configs': describeConfigs,
  'alter-configs': alterConfigs,
  'delete-records': deleteRecords,
  'fetch-offsets': fetchOffsets,
  'reset-offsets': resetOffsets,
  'describe-group': describeGroup,
  'delete-group': deleteGroup,
  'delete-topic': deleteTopic,
}

// What the test can assert about a failure: kafkajs' error class, Kafka's error type (e.g.
// NON_EMPTY_GROUP) and, for errors about several groups or partitions, each one's type. kafkajs'
// retrier wraps the error it gave up on (KafkaJSNonRetriableError): its cause says more.
function describeError(error) {
  const inner = error.cause instanceof Error ? error.cause : error
  const causes = []
  for (const { groupId, error: cause } of inner.groups || []) {
    causes.push({ group: groupId, type: cause ? cause.type : null })
  }
  for (const { partition, error: cause } of inner.partitions || []) {
    causes.push({ partition, type: cause ? cause.type : null })
  }
  return {
    event: 'error',
    name: error.name,
    cause: inner === error ? null : inner.name,
    type: error.type || inner.type || null,
    message: error.message,
    // Set when the broker does not serve an API kafkajs needs (KafkaJSServerDoesNotSupportApiKey).
    api_name: error.apiName || inner.apiName || null,
    causes,
  }
}

async function main() {
  const { values: options, positionals } = parseArgs({
    args: process.argv.slice(2),
    options: OPTIONS,
    allowPositionals: true,
  })
  const command = COMMANDS[positionals[0]]
  if (positionals.length !== 1 || command === undefined) {
    process.stderr.write(`usage: client.js {${Object.keys(COMMANDS).join('|')}} --brokers ...\n`)
    process.exit(2)
  }
  // A deadline on everything: a test must fail, not hang, when the broker does not answer.
  const timeoutMs = Number(options['timeout-ms'])
  setTimeout(() => {
    emit({ event: 'error', name: 'Timeout', type: null, message: `no result after ${timeoutMs} ms` })
    process.exit(1)
  }, timeoutMs)
  try {
    await command(options)
  } catch (error) {
    emit(describeError(error))
    process.exit(1)
  }
  // kafkajs may leave timers behind; the work is done.
  process.exit(0)
}

main()
