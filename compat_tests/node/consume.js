'use strict';
// ali-ons push consumer: collect `expect` messages (or until waitMs), linger for extras, close
// (which persists offsets and unregisters). failFirst: throw on a message's first delivery, so it
// comes back through CONSUMER_SEND_MSG_BACK and %RETRY%<group>.
// args: namesrv, topic, group, expression, expect, waitMs, lingerMs, failFirst, consumeFromWhere

const { Consumer } = require('ali-ons');
const { args, clientOptions, run, sleep, received } = require('./common');

run(async () => {
  const options = { consumerGroup: args.group, persistConsumerOffsetInterval: 1000 };
  if (args.consumeFromWhere) options.consumeFromWhere = args.consumeFromWhere;
  const consumer = new Consumer(clientOptions(options));
  const got = [];
  const errors = [];
  const failed = new Set();
  let resolveEnough;
  const enough = new Promise(resolve => { resolveEnough = resolve; });
  consumer.on('error', err => errors.push(String(err && err.message || err)));
  consumer.subscribe(args.topic, args.expression || '*', async msg => {
    const body = msg.body.toString();
    if (args.failFirst && !failed.has(body)) {
      failed.add(body);
      got.push(Object.assign(received(msg), { thrown: true }));
      throw new Error(`compat: first delivery of ${body} fails on purpose`);
    }
    got.push(received(msg));
    if (got.filter(m => !m.thrown).length >= (args.expect || 1)) resolveEnough();
  });
  await consumer.ready();
  await Promise.race([enough, sleep(args.waitMs || 30000)]);
  await sleep(args.lingerMs || 1000);
  await consumer.close();
  return { received: got, errors };
});
