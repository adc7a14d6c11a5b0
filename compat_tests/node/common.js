'use strict';
// Shared helpers for the ali-ons drivers: argument parsing, client options, the RESULT line.

const args = JSON.parse(process.argv[2] || '{}');

// CLIENTS.md: a name server address, a loopback client IP and a dummy httpclient (ali-ons asserts
// one exists even when nameSrv is given).
function clientOptions(extra) {
  return Object.assign({
    httpclient: { request: async () => { throw new Error('no HTTP name server lookup in tests'); } },
    nameSrv: args.namesrv,
    clientIP: '127.0.0.1',
    instanceName: args.instanceName || `compat-${process.pid}`,
    accessKeyId: '',
    accessKeySecret: '',
  }, extra);
}

function result(data) {
  process.stdout.write('RESULT ' + JSON.stringify(data) + '\n', () => process.exit(0));
}

function fail(err) {
  result({ exception: String(err && err.stack || err), traceback: String(err && err.stack || '') });
}

function run(main) {
  const timer = setTimeout(() => fail(new Error(`driver timed out after ${args.timeoutMs || 60000} ms`)),
    args.timeoutMs || 60000);
  main().then(data => { clearTimeout(timer); result(data); }, err => { clearTimeout(timer); fail(err); });
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

function received(msg) {
  return {
    topic: msg.topic,
    tags: msg.tags,
    keys: msg.keys,
    body: msg.body.toString(),
    msgId: msg.msgId,
    queueId: msg.queueId,
    queueOffset: Number(msg.queueOffset),
    reconsumeTimes: msg.reconsumeTimes,
    delayTimeLevel: msg.delayTimeLevel,
    storeTimestamp: Number(msg.storeTimestamp),
    bornTimestamp: Number(msg.bornTimestamp),
    receivedAt: Date.now(),
  };
}

module.exports = { args, clientOptions, result, fail, run, sleep, received };
