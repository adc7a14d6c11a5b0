'use strict';
// ali-ons offset calls against the broker: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET
// oneway (15), GET_MAX_OFFSET (30), SEARCH_OFFSET_BY_TIMESTAMP (29) for every queue of a topic.
// The max/search calls go through MQClient's own route lookup (what the consumer uses).
// args: namesrv, broker, brokerName, topic, group, queues, commit: {queueId: offset}

const { Producer } = require('ali-ons');
const MessageQueue = require('ali-ons/lib/message_queue');
const { args, clientOptions, run, sleep } = require('./common');

run(async () => {
  const producer = new Producer(clientOptions({ producerGroup: `${args.group}_p` }));
  await producer.ready();
  const api = producer._mqClient;
  const out = { before: {}, max: {}, searchFuture: {}, searchPast: {}, after: {} };
  const queues = args.queues || 4;
  const query = async q => {
    try {
      return await api.queryConsumerOffset(args.broker, { consumerGroup: args.group, topic: args.topic, queueId: q }, 5000);
    } catch (err) {
      return `error:${err.code}`;
    }
  };
  for (let q = 0; q < queues; q++) {
    out.before[q] = await query(q);
    const mq = new MessageQueue(args.topic, args.brokerName, q);
    out.max[q] = await api.maxOffset(mq);
    out.searchPast[q] = await api.searchOffset(mq, Date.now() - 3600 * 1000);
    out.searchFuture[q] = await api.searchOffset(mq, Date.now() + 3600 * 1000);
  }
  for (const [q, offset] of Object.entries(args.commit || {})) {
    await api.updateConsumerOffsetOneway(args.broker, {
      consumerGroup: args.group, topic: args.topic, queueId: Number(q), commitOffset: offset,
    });
  }
  await sleep(500);
  for (let q = 0; q < queues; q++) out.after[q] = await query(q);
  await producer.close();
  return out;
});
