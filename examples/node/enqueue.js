// A queuey producer in Node, written from docs/protocol.md alone (amqplib).
//
// Enqueues three `greet` jobs on one queue: one now, one at priority 5, and one delayed
// through the delay ladder. Prints each job id once the broker confirmed it; exits 1 if
// a job surely was not enqueued, 4 if it may or may not have been (as `queuey enqueue`).
//
//   QUEUEY_AMQP_URL      broker URL (default amqp://guest:guest@127.0.0.1:5672/%2F)
//   QUEUEY_QUEUE         the queue (default "alpha", as in queuey.toml)
//   QUEUEY_MAX_PRIORITY  the queue's max_priority in queuey.toml (default 10; "" for none)
//   QUEUEY_DELAY_MS      the delayed job's delay in ms (default 1500)
//   QUEUEY_TRACEPARENT   a W3C traceparent to send with every job (protocol.md, "Tracing
//                        headers"): the jobs' spans join that trace. An app traced with
//                        OpenTelemetry gets it from propagation.inject(context.active(), headers).
//   QUEUEY_TRACESTATE    its tracestate, if any
'use strict';

const crypto = require('node:crypto');
const amqp = require('amqplib');

const URL = process.env.QUEUEY_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2F';
const QUEUE = process.env.QUEUEY_QUEUE || 'alpha';
const MAX_PRIORITY = process.env.QUEUEY_MAX_PRIORITY ?? '10';
const DELAY_MS = Number(process.env.QUEUEY_DELAY_MS || 1500);
const TRACEPARENT = process.env.QUEUEY_TRACEPARENT || '';
const TRACESTATE = process.env.QUEUEY_TRACESTATE || '';

// protocol.md, "The delay ladder".
const DELAY_LEVELS = 36;
const LADDER_TOP = `queuey.delay.${DELAY_LEVELS - 1}`;
const DELIVER_EXCHANGE = 'queuey.delay.deliver';

class NotEnqueued extends Error {}
class EnqueueUnknown extends Error {}

// protocol.md, "The envelope": the message body, format version 1.
function envelope(jobType, payload, priority = 0) {
  return {
    v: 1,
    job_id: crypto.randomUUID(),
    job_type: jobType,
    queue: QUEUE,
    attempt: 1,
    deferrals: 0,
    priority,
    enqueued_at: Date.now(),
    payload,
  };
}

// protocol.md, "The delay ladder": 36 bits of the delay in ms, highest first, then the queue.
function delayRoutingKey(ms, queue) {
  if (!Number.isInteger(ms) || ms < 1 || ms >= 2 ** DELAY_LEVELS) {
    throw new NotEnqueued(`a delay is 1 to ${2 ** DELAY_LEVELS - 1} ms, not ${ms}`);
  }
  return [...ms.toString(2).padStart(DELAY_LEVELS, '0')].join('.') + '.' + queue;
}

// protocol.md, "Declaring a queue": exactly queuey's arguments, or RabbitMQ refuses (406).
async function declareQueue(ch) {
  await ch.assertQueue(`${QUEUE}.dlq`, { durable: true, arguments: { 'x-queue-type': 'classic' } });
  const args = {
    'x-queue-type': 'classic',
    'x-dead-letter-exchange': '',
    'x-dead-letter-routing-key': `${QUEUE}.dlq`,
  };
  if (MAX_PRIORITY !== '') args['x-max-priority'] = Number(MAX_PRIORITY);
  await ch.assertQueue(QUEUE, { durable: true, arguments: args });
  // The ladder exists once a queuey worker or producer ran on this vhost.
  await ch.checkExchange(DELIVER_EXCHANGE);
  await ch.bindQueue(QUEUE, DELIVER_EXCHANGE, '*.'.repeat(DELAY_LEVELS) + QUEUE);
}

// protocol.md, "Publishing": persistent, mandatory, confirmed; three outcomes.
function publish(ch, returned, env, delayMs = 0) {
  const [exchange, routingKey] = delayMs > 0
    ? [LADDER_TOP, delayRoutingKey(delayMs, env.queue)]
    : ['', env.queue];
  const properties = {
    persistent: true,
    mandatory: true,
    contentType: 'application/json',
    messageId: env.job_id,
    type: env.job_type,
    timestamp: Math.floor(env.enqueued_at / 1000),
  };
  if (env.priority > 0) properties.priority = env.priority;
  // protocol.md, "Tracing headers": beside the body, never in it.
  if (TRACEPARENT) {
    properties.headers = { traceparent: TRACEPARENT };
    if (TRACESTATE) properties.headers.tracestate = TRACESTATE;
  }
  return new Promise((resolve, reject) => {
    ch.publish(exchange, routingKey, Buffer.from(JSON.stringify(env)), properties, (err) => {
      if (returned.has(env.job_id)) {
        reject(new NotEnqueued(`job ${env.job_id}: no queue named ${env.queue} (returned)`));
      } else if (err && err.message === 'message nacked') {
        reject(new NotEnqueued(`job ${env.job_id}: RabbitMQ refused it (nack)`));
      } else if (err) {
        reject(new EnqueueUnknown(`job ${env.job_id}: not confirmed (${err.message}); ` +
          'it may be enqueued: send it again with the same job_id'));
      } else {
        resolve(env.job_id);
      }
    });
  });
}

async function main() {
  const conn = await amqp.connect(URL);
  try {
    const ch = await conn.createConfirmChannel();
    // A returned message comes before its confirm: remember it by its message id.
    const returned = new Set();
    ch.on('return', (msg) => returned.add(msg.properties.messageId));
    await declareQueue(ch);
    const jobs = [
      [envelope('greet', { name: 'node' }), 0],
      [envelope('greet', { name: 'urgent node' }, MAX_PRIORITY === '' ? 0 : 5), 0],
      [envelope('greet', { name: 'later node' }), DELAY_MS],
    ];
    for (const [env, delay] of jobs) {
      console.log(await publish(ch, returned, env, delay));
    }
  } finally {
    await conn.close().catch(() => {});
  }
}

main().catch((err) => {
  console.error(`error: ${err.message}`);
  process.exit(err instanceof EnqueueUnknown ? 4 : 1);
});
