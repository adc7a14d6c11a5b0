package compat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Scheduled messages: delayTimeLevel 1 (1 s) and 2 (5 s) are invisible in their topic until their
 * time has passed and are then delivered once, to the queue their send named, with the msgId the
 * send returned, their body, keys, tags and user properties, and the DELAY / REAL_TOPIC / REAL_QID
 * properties the schedule service leaves on them. The wrapper compares the property sets.
 */
public final class Delay {
    public static void main(String[] argv) {
        Harness.run(argv, Delay::scenario);
    }

    static final int[] LEVELS = {1, 1, 2, 2};
    static final long[] DELAY_MS = {0, 1000, 5000};

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        DefaultMQProducer producer = new DefaultMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.setSendMsgTimeout(10_000); // a loaded machine answers slowly
        producer.start();

        Map<String, SendResult> sent = new LinkedHashMap<>();
        Map<String, Long> sendStart = new HashMap<>();
        Map<String, Long> sendEnd = new HashMap<>();
        Map<String, Integer> levelOf = new HashMap<>();
        List<String> badSends = new ArrayList<>();
        for (int i = 0; i < LEVELS.length; i++) {
            String body = "delay-body-" + i;
            Message m = new Message(topic, "TagL" + LEVELS[i], "delay-key-" + i, Harness.utf8(body));
            m.setDelayTimeLevel(LEVELS[i]);
            m.putUserProperty("index", Integer.toString(i));
            sendStart.put(body, System.currentTimeMillis());
            SendResult r = producer.send(m);
            sendEnd.put(body, System.currentTimeMillis());
            sent.put(body, r);
            levelOf.put(body, LEVELS[i]);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                badSends.add(body + ": " + r.getSendStatus());
            }
        }
        h.check("delayed sends answered SEND_OK", badSends.isEmpty(), badSends);
        producer.shutdown();

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group") + "_reader");
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        List<MessageQueue> queues = new ArrayList<>(pull.fetchSubscribeMessageQueues(topic));
        Map<MessageQueue, Long> next = new HashMap<>();
        for (MessageQueue mq : queues) {
            next.put(mq, 0L);
        }
        Map<String, MessageExt> got = new LinkedHashMap<>();
        Map<String, Long> arrived = new HashMap<>();
        List<String> duplicates = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 12_000;
        while (got.size() < LEVELS.length && System.currentTimeMillis() < deadline) {
            for (MessageQueue mq : queues) {
                PullResult r = pull.pull(mq, "*", next.get(mq), 32);
                long now = System.currentTimeMillis();
                if (r.getPullStatus() == PullStatus.FOUND) {
                    for (MessageExt m : r.getMsgFoundList()) {
                        String body = Harness.text(m.getBody());
                        if (got.put(body, m) != null) {
                            duplicates.add(body);
                        }
                        arrived.put(body, now);
                    }
                }
                next.put(mq, r.getNextBeginOffset());
            }
            Thread.sleep(100);
        }
        Thread.sleep(300);
        for (MessageQueue mq : queues) { // nothing more may come after the last one
            PullResult r = pull.pull(mq, "*", next.get(mq), 32);
            if (r.getPullStatus() == PullStatus.FOUND) {
                for (MessageExt m : r.getMsgFoundList()) {
                    duplicates.add(Harness.text(m.getBody()));
                }
            }
        }
        pull.shutdown();
        h.check("every delayed message delivered once", got.size() == LEVELS.length && duplicates.isEmpty(),
            "delivered " + got.keySet() + ", again " + duplicates);

        List<String> early = new ArrayList<>();
        List<String> late = new ArrayList<>();
        Map<String, Object> waited = new TreeMap<>();
        for (String body : sent.keySet()) {
            if (!arrived.containsKey(body)) {
                continue;
            }
            long delay = DELAY_MS[levelOf.get(body)];
            long sinceStart = arrived.get(body) - sendStart.get(body);
            long sinceEnd = arrived.get(body) - sendEnd.get(body);
            waited.put(body, sinceEnd);
            if (sinceStart < delay) {
                early.add(body + " level " + levelOf.get(body) + " visible after " + sinceStart + " ms");
            }
            if (sinceEnd > delay + 5000) {
                late.add(body + " level " + levelOf.get(body) + " visible after " + sinceEnd + " ms");
            }
        }
        h.put("visibleAfterMs", waited);
        h.check("no delayed message visible before its level's time", early.isEmpty(), early);
        h.check("every delayed message visible within 5 s after its time", late.isEmpty(), late);

        List<String> wrong = new ArrayList<>();
        Map<String, Object> props = new TreeMap<>();
        Map<String, Object> meta = new TreeMap<>();
        for (Map.Entry<String, MessageExt> e : got.entrySet()) {
            String body = e.getKey();
            MessageExt m = e.getValue();
            SendResult r = sent.get(body);
            if (r == null) {
                wrong.add(body + ": not sent");
                continue;
            }
            int i = Integer.parseInt(body.substring("delay-body-".length()));
            int level = levelOf.get(body);
            if (!topic.equals(m.getTopic()) || m.getQueueId() != r.getMessageQueue().getQueueId()) {
                wrong.add(body + ": in " + m.getTopic() + "/" + m.getQueueId() + ", sent to " + r.getMessageQueue());
            }
            if (!("TagL" + level).equals(m.getTags()) || !("delay-key-" + i).equals(m.getKeys())
                || !Integer.toString(i).equals(m.getUserProperty("index"))) {
                wrong.add(body + ": " + Harness.describe(m));
            }
            if (!r.getMsgId().equals(m.getMsgId())) {
                wrong.add(body + ": msgId sent " + r.getMsgId() + ", consumed " + m.getMsgId());
            }
            if (m.getReconsumeTimes() != 0) {
                wrong.add(body + ": reconsumeTimes " + m.getReconsumeTimes());
            }
            props.put(body, Stored.properties(m));
            meta.put(body, Stored.meta(m));
        }
        h.put("properties", props);
        h.put("stored", meta);
        h.check("delivered to the queue sent to, with tags, keys, user properties and the send's msgId",
            wrong.isEmpty(), wrong);

        List<String> badSchedule = new ArrayList<>();
        for (Map.Entry<String, MessageExt> e : got.entrySet()) {
            MessageExt m = e.getValue();
            int level = levelOf.getOrDefault(e.getKey(), -1);
            String delay = m.getProperty(MessageConst.PROPERTY_DELAY_TIME_LEVEL);
            String realTopic = m.getProperty(MessageConst.PROPERTY_REAL_TOPIC);
            String realQid = m.getProperty(MessageConst.PROPERTY_REAL_QUEUE_ID);
            if (!Integer.toString(level).equals(delay) || !topic.equals(realTopic)
                || !Integer.toString(m.getQueueId()).equals(realQid)) {
                badSchedule.add(e.getKey() + ": DELAY=" + delay + " REAL_TOPIC=" + realTopic + " REAL_QID=" + realQid);
            }
            long stored = m.getStoreTimestamp() - m.getBornTimestamp();
            if (stored < DELAY_MS[Math.max(level, 0)]) {
                badSchedule.add(e.getKey() + ": stored " + stored + " ms after it was born");
            }
        }
        h.check("a delivered message keeps DELAY, REAL_TOPIC and REAL_QID and is stored after its time",
            badSchedule.isEmpty(), badSchedule);
    }
}
