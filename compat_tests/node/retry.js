'use strict';
// ali-ons push consumer whose handler throws for chosen messages, so they come back through
// CONSUMER_SEND_MSG_BACK and %RETRY%<group> (and, past maxReconsumeTimes, land in %DLQ%<group>).
// args: namesrv, topic, group, fail {body: times, -1 = always}, maxReconsumeTimes, expect (successful
// deliveries to wait for), waitMs, lingerMs, stopFile (stop when it exists)

const fs = require('fs');
const { Consumer } = require('ali-ons');
const { args, clientOptions, run, sleep, received } = require('./common');

run(async () => {
  const options = { consumerGroup: args.group, persistConsumerOffsetInterval: 1000 };
  if (args.maxReconsumeTimes !== undefined) options.maxReconsumeTimes = args.maxReconsumeTimes;
  const consumer = new Consumer(clientOptions(options));
  const failLeft = Object.assign({}, args.fail || {});
  const got = [];
  const errors = [];
  const done = new Set();
  consumer.on('error', err => errors.push(String(err && err.message || err)));
  consumer.subscribe(args.topic, args.expression || '*', async msg => {
    const body = msg.body.toString();
    const left = failLeft[body] || 0;
    if (left !== 0) {
      failLeft[body] = left > 0 ? left - 1 : -1;
      got.push(Object.assign(received(msg), { thrown: true }));
      throw new Error(`compat: delivery of ${body} fails on purpose`);
    }
    got.push(received(msg));
    done.add(body);
  });
  await consumer.ready();
  const deadline = Date.now() + (args.waitMs || 30000);
  while (Date.now() < deadline) {
    if (args.expect && done.size >= args.expect) break;
    if (args.stopFile && fs.existsSync(args.stopFile)) break;
    await sleep(100);
  }
  await sleep(args.lingerMs || 500);
  await consumer.close();
  return { received: got, errors };
});
