package compat;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A push consumer that always answers RECONSUME_LATER (next try at delay level 1, at most 2
 * reconsumes): the message comes back with reconsumeTimes 1, then 2, each time under the original
 * msgId with its body, keys and properties, and after the last try it lands in %DLQ%group, where a
 * pull consumer reads it; a message sent back with delay level -1 goes there at once. The wrapper
 * compares the retried and dead-lettered properties.
 */
public final class RetryDlq {
    public static void main(String[] argv) {
        // the retry topic is made by the consumer's first heartbeat: let the client see its route and
        // rebalance onto it within a second, not after the default 30 s / 20 s
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        Harness.run(argv, RetryDlq::scenario);
    }

    static final int MAX_RECONSUME = 2;

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        List<MessageExt> deliveries = Collections.synchronizedList(new ArrayList<>());
        List<Long> deliveredAt = Collections.synchronizedList(new ArrayList<>());
        List<MessageExt> deadDeliveries = Collections.synchronizedList(new ArrayList<>());

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(h.namesrv());
        consumer.setPollNameServerInterval(1000);
        consumer.setMaxReconsumeTimes(MAX_RECONSUME);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) { // one message a call (consumeMessageBatchMaxSize 1)
                if ("TagDead".equals(m.getTags())) {
                    deadDeliveries.add(m);
                    context.setDelayLevelWhenNextConsume(-1); // straight to the DLQ
                } else {
                    deliveries.add(m);
                    deliveredAt.add(System.currentTimeMillis());
                    context.setDelayLevelWhenNextConsume(1);
                }
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        Harness.startPush(consumer);

        DefaultMQProducer producer = new DefaultMQProducer(group + "_producer");
        producer.setNamesrvAddr(h.namesrv());
        producer.setSendMsgTimeout(10_000); // a loaded machine answers slowly
        producer.start();
        Message msg = new Message(topic, "TagRetry", "retry-key", Harness.utf8("retry-body"));
        msg.putUserProperty("origin", "producer");
        SendResult sent = producer.send(msg);
        Message doomed = new Message(topic, "TagDead", "dead-key", Harness.utf8("dead-body"));
        doomed.putUserProperty("origin", "producer");
        SendResult sentDead = producer.send(doomed);
        h.check("sends answered SEND_OK",
            sent.getSendStatus() == SendStatus.SEND_OK && sentDead.getSendStatus() == SendStatus.SEND_OK,
            sent.getSendStatus() + ", " + sentDead.getSendStatus());
        producer.shutdown();

        boolean all = Harness.waitFor(() -> deliveries.size() >= MAX_RECONSUME + 1, 20_000);
        Thread.sleep(2500); // a try past the maximum would come within this
        consumer.shutdown();

        List<Integer> times = new ArrayList<>();
        List<String> wrong = new ArrayList<>();
        List<Object> seen = new ArrayList<>();
        synchronized (deliveries) {
            for (MessageExt m : deliveries) {
                times.add(m.getReconsumeTimes());
                seen.add(Harness.describe(m));
                if (!"retry-body".equals(Harness.text(m.getBody())) || !"retry-key".equals(m.getKeys())
                    || !"TagRetry".equals(m.getTags()) || !"producer".equals(m.getUserProperty("origin"))
                    || !topic.equals(m.getTopic())) {
                    wrong.add(Harness.describe(m).toString());
                }
                if (!sent.getMsgId().equals(m.getMsgId())) {
                    wrong.add("msgId " + m.getMsgId() + ", sent " + sent.getMsgId());
                }
            }
        }
        h.put("deliveries", seen);
        List<Integer> expected = new ArrayList<>();
        for (int i = 0; i <= MAX_RECONSUME; i++) {
            expected.add(i);
        }
        h.check("delivered with reconsumeTimes 0, 1, 2 and not again", all && times.equals(expected), times);
        h.check("each try has the original body, keys, tags, properties, topic and msgId", wrong.isEmpty(), wrong);

        List<Long> gaps = new ArrayList<>();
        for (int i = 1; i < deliveredAt.size(); i++) {
            gaps.add(deliveredAt.get(i) - deliveredAt.get(i - 1));
        }
        boolean levelOne = gaps.size() == MAX_RECONSUME;
        for (long gap : gaps) {
            levelOne &= gap >= 900 && gap < 8000;
        }
        h.check("each retry came after the 1 s of delay level 1", levelOne, gaps);

        Map<String, Object> retryProps = new TreeMap<>();
        Map<String, Object> retryMeta = new TreeMap<>();
        List<String> badRetry = new ArrayList<>();
        synchronized (deliveries) {
            for (MessageExt m : deliveries) {
                if (m.getReconsumeTimes() == 0) {
                    continue;
                }
                retryProps.put("try" + m.getReconsumeTimes(), Stored.properties(m));
                retryMeta.put("try" + m.getReconsumeTimes(), Stored.meta(m));
                if (!topic.equals(m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC))
                    || !sent.getOffsetMsgId().equals(m.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID))) {
                    badRetry.add("RETRY_TOPIC=" + m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC)
                        + " ORIGIN_MESSAGE_ID=" + m.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID)
                        + " (sent " + sent.getOffsetMsgId() + ")");
                }
            }
        }
        h.put("retryProperties", retryProps);
        h.put("retryStored", retryMeta);
        h.check("a retried message names its topic (RETRY_TOPIC) and first stored id (ORIGIN_MESSAGE_ID)",
            !retryProps.isEmpty() && badRetry.isEmpty(), badRetry);

        String dlq = MixAll.DLQ_GROUP_TOPIC_PREFIX + group;
        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group + "_dlq_reader");
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        List<MessageExt> dead = new ArrayList<>();
        String readError = null;
        // each message's dead letter is on the broker it was sent to (both the same one but on a
        // topic over several brokers)
        List<MessageQueue> dlqs = new ArrayList<>();
        for (SendResult r : List.of(sent, sentDead)) {
            MessageQueue dq = new MessageQueue(dlq, r.getMessageQueue().getBrokerName(), 0);
            if (!dlqs.contains(dq)) {
                dlqs.add(dq);
            }
        }
        long deadline = System.currentTimeMillis() + 10_000;
        while (dead.size() < 2 && System.currentTimeMillis() < deadline) {
            try {
                List<MessageExt> found = new ArrayList<>();
                for (MessageQueue dq : dlqs) {
                    PullResult r = pull.pull(dq, "*", 0, 32);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        found.addAll(r.getMsgFoundList());
                    }
                }
                dead.clear();
                dead.addAll(found);
                readError = null;
            } catch (Exception e) {
                readError = e.toString();
            }
            if (dead.size() < 2) {
                Thread.sleep(200);
            }
        }
        pull.shutdown();
        List<Object> deadSeen = new ArrayList<>();
        Map<String, Object> dlqProps = new TreeMap<>();
        Map<String, Object> dlqMeta = new TreeMap<>();
        Map<String, MessageExt> deadByBody = new TreeMap<>();
        for (MessageExt m : dead) {
            deadSeen.add(Harness.describe(m));
            deadByBody.put(Harness.text(m.getBody()), m);
            dlqProps.put(Harness.text(m.getBody()), Stored.properties(m));
            dlqMeta.put(Harness.text(m.getBody()), Stored.meta(m));
        }
        h.put("dlq", deadSeen);
        h.put("dlqProperties", dlqProps);
        h.put("dlqStored", dlqMeta);
        h.put("dlqReadError", readError);
        h.check("both messages are in %DLQ%group, once each",
            dead.size() == 2 && deadByBody.keySet().equals(new java.util.TreeSet<>(List.of("dead-body", "retry-body"))),
            readError != null ? readError : deadSeen);
        MessageExt d = deadByBody.get("retry-body");
        h.check("the dead-lettered message has the body, keys, tags, properties and msgId sent",
            d != null && "retry-key".equals(d.getKeys()) && "TagRetry".equals(d.getTags())
                && "producer".equals(d.getUserProperty("origin")) && sent.getMsgId().equals(d.getMsgId())
                && dlq.equals(d.getTopic()),
            deadSeen);
        h.check("the dead-lettered message counts its tries (reconsumeTimes)",
            d != null && d.getReconsumeTimes() == MAX_RECONSUME + 1, d == null ? null : d.getReconsumeTimes());
        MessageExt n = deadByBody.get("dead-body");
        List<Integer> deadTimes = new ArrayList<>();
        synchronized (deadDeliveries) {
            for (MessageExt m : deadDeliveries) {
                deadTimes.add(m.getReconsumeTimes());
            }
        }
        h.check("a message sent back with delay level -1 is consumed once and goes to the DLQ at once",
            deadTimes.equals(List.of(0)) && n != null && "dead-key".equals(n.getKeys())
                && "producer".equals(n.getUserProperty("origin")) && sentDead.getMsgId().equals(n.getMsgId())
                && n.getReconsumeTimes() == 1,
            "tries " + deadTimes + ", in the DLQ " + (n == null ? null : Harness.describe(n)));
    }

    /** MixAll moved package between the clients; the prefix is all this program needs. */
    static final class MixAll {
        static final String DLQ_GROUP_TOPIC_PREFIX = "%DLQ%";
    }
}
