package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Request-reply: DefaultMQProducer.request (sync and with a RequestCallback) to a topic whose push
 * consumer answers with MessageUtil.createReplyMessage and a producer's send (SEND_REPLY_MESSAGE);
 * the broker pushes the answer to the requester's connection. A request nobody answers times out
 * with RequestTimeoutException; an answer to a requester that has shut down gets the broker's error.
 * The replies the requester received, the requests the replier saw and the copies the broker stored
 * in {@code <cluster>_REPLY_TOPIC} are reported for comparison.
 */
public final class RequestReply {
    public static void main(String[] argv) {
        Harness.run(argv, RequestReply::scenario);
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        Map<String, Map<String, String>> requestsSeen = new ConcurrentHashMap<>(); // body -> properties
        Map<String, Object> replySends = new ConcurrentHashMap<>(); // body -> what the replier's send gave
        CountDownLatch requesterGone = new CountDownLatch(1);

        DefaultMQProducer requester = producer(h, group + "_req", "rr-requester", topic);
        DefaultMQProducer replier = h.producer(group + "_rep");
        DefaultMQPushConsumer consumer = h.pushConsumer(group + "_cons", "rr-requester");
        consumer.subscribe(topic, "*");
        consumer.setConsumeThreadMin(4);
        consumer.setConsumeThreadMax(4);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = Harness.text(m.getBody());
                requestsSeen.put(body, new TreeMap<>(m.getProperties()));
                if (body.startsWith("noreply")) {
                    continue;
                }
                try {
                    if (body.startsWith("late")) {
                        requesterGone.await(30, TimeUnit.SECONDS);
                    }
                    StringBuilder answer = new StringBuilder("re:" + body);
                    for (int i = 0; body.startsWith("big") && i < 6000; i++) {
                        answer.append('x'); // over compressMsgBodyOverHowmuch: the replier compresses it
                    }
                    Message reply = MessageUtil.createReplyMessage(m, Harness.utf8(answer.toString()));
                    reply.putUserProperty("answer", body);
                    SendResult r = replier.send(reply);
                    replySends.put(body, String.valueOf(r.getSendStatus()));
                } catch (Exception e) {
                    replySends.put(body, failure(e));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        Harness.startPush(consumer);

        // sync request
        Message ping = new Message(topic, "TagReq", "key-sync", Harness.utf8("sync-1"));
        ping.putUserProperty("kind", "sync");
        Message got = null;
        Object syncFailure = null;
        long asked = System.currentTimeMillis();
        try {
            got = requester.request(ping, 15_000);
        } catch (Exception e) {
            syncFailure = failure(e);
        }
        long took = System.currentTimeMillis() - asked;
        boolean answered = got != null && "re:sync-1".equals(Harness.text(got.getBody()));
        if (h.num("client", 4) >= 5) {
            // 5.3.3's request(msg, timeout) counts its latch down when the send is acknowledged
            // (acquireCountDownLatch in the send callback): unless the reply came first, it throws
            // RequestTimeoutException at once, whatever the broker does
            boolean atSendAck = syncFailure instanceof Map
                && "RequestTimeoutException".equals(((Map<?, ?>) syncFailure).get("class")) && took < 10_000;
            h.check("a sync request gets the answer, or (5.x client) ends when its send is acknowledged",
                answered || atSendAck, String.valueOf(syncFailure == null ? describe(got) : syncFailure));
        } else {
            h.check("a sync request gets the replier's answer", answered,
                String.valueOf(syncFailure == null ? describe(got) : syncFailure));
        }
        if (got != null) {
            h.check("the reply carries the request's CORRELATION_ID",
                ping.getProperty(MessageConst.PROPERTY_CORRELATION_ID) != null
                    && ping.getProperty(MessageConst.PROPERTY_CORRELATION_ID)
                        .equals(got.getProperty(MessageConst.PROPERTY_CORRELATION_ID)),
                String.valueOf(got.getProperties()));
            h.put("syncReply", describe(got));
            h.put("syncReplyProperties", new TreeMap<>(got.getProperties()));
        }

        // async request
        Map<String, Object> asyncOutcome = asyncRequest(requester,
            new Message(topic, "TagReq", "key-async", Harness.utf8("async-1")));
        Object asyncReply = asyncOutcome.get("reply");
        h.check("an async request's callback gets the answer", asyncReply instanceof Map
            && "re:async-1".equals(((Map<?, ?>) asyncReply).get("body")), String.valueOf(asyncOutcome));
        h.put("asyncReply", asyncReply);
        h.put("asyncReplyProperties", asyncOutcome.get("properties"));

        // an answer the replier compresses: the push carries its sysFlag, the requester decompresses
        Map<String, Object> bigOutcome = asyncRequest(requester, new Message(topic, "TagReq", Harness.utf8("big-1")));
        Object bigReply = bigOutcome.get("reply");
        Object bigBody = bigReply instanceof Map ? ((Map<?, ?>) bigReply).get("body") : null;
        h.check("an answer over 4 KiB (compressed by the replier) reaches the requester whole",
            bigBody instanceof String && ((String) bigBody).length() == 6008 && ((String) bigBody).startsWith("re:big-1"),
            bigBody instanceof String ? ((String) bigBody).length() + " chars" : String.valueOf(bigOutcome));
        if (bigReply instanceof Map) {
            Map<String, Object> big = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) bigReply).entrySet()) {
                big.put(String.valueOf(e.getKey()), "body".equals(e.getKey()) ? ((String) bigBody).length() : e.getValue());
            }
            h.put("bigReply", big);
        }

        // a request nobody answers
        Object noReply;
        try {
            Message r = requester.request(new Message(topic, "TagReq", Harness.utf8("noreply-1")), 2_000);
            noReply = "answered: " + describe(r);
        } catch (Exception e) {
            noReply = failure(e);
        }
        h.put("noReply", noReply);
        h.check("a request nobody answers times out: RequestTimeoutException REQUEST_TIMEOUT_EXCEPTION (10006)",
            noReply instanceof Map && "RequestTimeoutException".equals(((Map<?, ?>) noReply).get("class"))
                && Integer.valueOf(10006).equals(((Map<?, ?>) noReply).get("code")), String.valueOf(noReply));

        // an answer to a requester that has gone
        DefaultMQProducer leaving = producer(h, group + "_gone", "rr-gone", topic);
        String leavingId = leaving.getDefaultMQProducerImpl().getmQClientFactory().getClientId();
        Object lateRequest;
        try {
            leaving.request(new Message(topic, "TagReq", Harness.utf8("late-1")), 3_000);
            lateRequest = "answered";
        } catch (Exception e) {
            lateRequest = failure(e);
        }
        leaving.shutdown();
        requesterGone.countDown();
        h.check("the late request timed out on its requester", lateRequest instanceof Map
            && "RequestTimeoutException".equals(((Map<?, ?>) lateRequest).get("class")), String.valueOf(lateRequest));
        Harness.waitFor(() -> replySends.containsKey("late-1"), 40_000);
        Object late = replySends.get("late-1");
        String expected = "push reply message fail, channel of <" + leavingId + "> not found.";
        boolean asJava = late instanceof Map && Integer.valueOf(1).equals(((Map<?, ?>) late).get("code"))
            && expected.equals(((Map<?, ?>) late).get("brokerRemark"));
        h.check("the answer to a requester that has gone fails: SYSTEM_ERROR, channel not found", asJava,
            String.valueOf(late));
        if (late instanceof Map) {
            Map<String, Object> normalized = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) late).entrySet()) {
                normalized.put(String.valueOf(e.getKey()),
                    String.valueOf(e.getValue()).replace(leavingId, "<clientId>").replaceAll("cost \\[\\d+\\]ms", "cost"));
            }
            h.put("lateReplySend", normalized);
        }
        Map<String, Object> sends = new TreeMap<>();
        replySends.forEach((k, v) -> sends.put(k, String.valueOf(v).replace(leavingId, "<clientId>")
            .replaceAll("cost \\[\\d+\\]ms", "cost")));
        h.put("replySends", sends);
        Map<String, Object> requestProps = new TreeMap<>();
        requestProps.putAll(requestsSeen);
        h.put("requestProperties", requestProps);
        h.check("the replier saw each request with CORRELATION_ID, REPLY_TO_CLIENT, TTL and CLUSTER",
            requestsSeen.keySet().containsAll(List.of("sync-1", "async-1", "big-1", "noreply-1", "late-1"))
                && requestsSeen.values().stream().allMatch(p -> p.containsKey(MessageConst.PROPERTY_CORRELATION_ID)
                    && p.containsKey(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT)
                    && p.containsKey(MessageConst.PROPERTY_MESSAGE_TTL) && p.containsKey(MessageConst.PROPERTY_CLUSTER)),
            String.valueOf(requestsSeen.keySet()));

        // the copies the broker stored (storeReplyMessageEnable): by the body they answer
        Map<String, String> correlation = new TreeMap<>();
        for (Map.Entry<String, Map<String, String>> e : requestsSeen.entrySet()) {
            correlation.put(e.getValue().get(MessageConst.PROPERTY_CORRELATION_ID), e.getKey());
        }
        String cluster = requestsSeen.containsKey("sync-1") ? requestsSeen.get("sync-1").get(MessageConst.PROPERTY_CLUSTER) : null;
        if (cluster != null) {
            DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group + "_reader");
            pull.setNamesrvAddr(h.namesrv());
            pull.start();
            List<MessageExt> all = Harness.drain(pull, cluster + "_REPLY_TOPIC", Integer.MAX_VALUE, 3_000);
            pull.shutdown();
            Map<String, List<Object>> storedByBody = new TreeMap<>();
            for (MessageExt m : all) {
                String answers = correlation.get(m.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
                if (answers != null) {
                    Map<String, Object> d = new TreeMap<>();
                    d.put("body", Harness.text(m.getBody()));
                    d.put("properties", new TreeMap<>(m.getProperties()));
                    d.put("stored", Stored.meta(m));
                    storedByBody.computeIfAbsent(answers, k -> new ArrayList<>()).add(d);
                }
            }
            h.put("stored", storedByBody);
            Map<String, Integer> copies = new TreeMap<>();
            storedByBody.forEach((k, v) -> copies.put(k, v.size()));
            h.check("the broker stored each reply it was sent in <cluster>_REPLY_TOPIC",
                copies.getOrDefault("sync-1", 0) == 1 && copies.getOrDefault("async-1", 0) == 1
                    && copies.getOrDefault("big-1", 0) == 1
                    && !copies.containsKey("noreply-1") && copies.getOrDefault("late-1", 0) >= 1, String.valueOf(copies));
        }
        consumer.shutdown();
        replier.shutdown();
        requester.shutdown();
    }

    /** DefaultMQProducer.request with a RequestCallback: what the callback got (reply, properties or failure). */
    static Map<String, Object> asyncRequest(DefaultMQProducer requester, Message msg) throws Exception {
        CountDownLatch answered = new CountDownLatch(1);
        Map<String, Object> outcome = new ConcurrentHashMap<>();
        requester.request(msg, new RequestCallback() {
            @Override
            public void onSuccess(Message message) {
                outcome.put("reply", describe(message));
                outcome.put("properties", new TreeMap<>(message.getProperties()));
                answered.countDown();
            }

            @Override
            public void onException(Throwable e) {
                outcome.put("failure", failure(e));
                answered.countDown();
            }
        }, 15_000);
        if (!answered.await(20, TimeUnit.SECONDS)) {
            outcome.put("failure", "no callback in 20 s");
        }
        return outcome;
    }

    /** A started producer with its own client instance, known to the topic's broker (heartbeat sent). */
    static DefaultMQProducer producer(Harness h, String group, String instance, String topic) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(h.namesrv());
        p.setInstanceName(instance);
        p.setSendMsgTimeout(10_000);
        p.start();
        p.getDefaultMQProducerImpl().getmQClientFactory().updateTopicRouteInfoFromNameServer(topic);
        p.getDefaultMQProducerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
        return p;
    }

    static Map<String, Object> describe(Message m) {
        Map<String, Object> d = new TreeMap<>();
        if (m == null) {
            return d;
        }
        d.put("body", Harness.text(m.getBody()));
        d.put("topicSuffix", m.getTopic() == null ? null : m.getTopic().replaceAll("^.*_REPLY_TOPIC$", "_REPLY_TOPIC"));
        d.put("flag", m.getFlag());
        d.put("user", m.getUserProperty("answer"));
        if (m instanceof MessageExt) {
            MessageExt e = (MessageExt) m;
            d.put("queueId", e.getQueueId());
            d.put("reconsumeTimes", e.getReconsumeTimes());
            d.put("sysFlag", e.getSysFlag());
        }
        return d;
    }

    /** What an exception says: its class, response code, and the broker's remark if one is in the chain. */
    static Map<String, Object> failure(Throwable e) {
        Map<String, Object> f = new TreeMap<>();
        f.put("class", e.getClass().getSimpleName());
        if (e instanceof RequestTimeoutException) {
            f.put("code", ((RequestTimeoutException) e).getResponseCode());
        } else if (e instanceof MQClientException) {
            f.put("code", ((MQClientException) e).getResponseCode());
        } else if (e instanceof MQBrokerException) {
            f.put("code", ((MQBrokerException) e).getResponseCode());
        }
        for (Throwable c = e; c != null; c = c.getCause()) {
            if (c instanceof MQBrokerException) {
                f.put("brokerCode", ((MQBrokerException) c).getResponseCode());
                f.put("brokerRemark", ((MQBrokerException) c).getErrorMessage());
                break;
            }
        }
        return f;
    }
}
