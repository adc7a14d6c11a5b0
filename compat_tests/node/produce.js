'use strict';
// ali-ons producer: optionally create the topic (UPDATE_AND_CREATE_TOPIC via the client API), then
// send `count` messages (SEND_MESSAGE_V2), optionally with a delay level.
// args: namesrv, topic, group, count, tags[], broker (for create), create, queues, delayLevel

const { Producer, Message } = require('ali-ons');
const { args, clientOptions, run } = require('./common');

run(async () => {
  const producer = new Producer(clientOptions({ producerGroup: args.group }));
  await producer.ready();
  if (args.create) {
    const queues = args.queues || 4;
    await producer._mqClient.createTopic(args.broker, 'TBW102', {
      topicName: args.topic, readQueueNums: queues, writeQueueNums: queues, perm: 6,
      topicFilterType: 'SINGLE_TAG', topicSysFlag: 0, order: false,
    }, 5000);
  }
  const results = [];
  const tags = args.tags || ['TagA'];
  for (let i = 0; i < (args.count || 1); i++) {
    const msg = new Message(args.topic, tags[i % tags.length], `${args.bodyPrefix || 'body'}-${i}`);
    msg.keys = [`${args.keyPrefix || 'key'}-${i}`];
    if (args.delayLevel) msg.delayTimeLevel = args.delayLevel;
    let sent;
    for (let attempt = 0; ; attempt++) {
      try {
        sent = await producer.send(msg);
        break;
      } catch (err) {
        // a freshly created topic may not have reached the name server's route table yet
        if (attempt >= 20 || !/no publish router data/.test(String(err))) throw err;
        await new Promise(r => setTimeout(r, 500));
        producer._topicPublishInfoTable.delete(args.topic);
      }
    }
    results.push({
      sendStatus: sent.sendStatus, msgId: sent.msgId, queueId: Number(sent.messageQueue.queueId),
      queueOffset: Number(sent.queueOffset), sentAt: Date.now(),
    });
  }
  await producer.close();
  return { results };
});
