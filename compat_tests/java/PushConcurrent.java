package compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A concurrently consuming push consumer (CONSUME_FROM_FIRST_OFFSET) gets every message of a topic
 * once, those sent before it started and those sent while it runs, each with the body, tags, keys,
 * user properties and msgId its send had. A second member of the group takes half the queues, and
 * what is sent then is consumed once between them. The offsets are committed, so a consumer of the
 * group started afterwards gets only what is sent after it.
 */
public final class PushConcurrent {
    public static void main(String[] argv) {
        Harness.run(argv, PushConcurrent::scenario);
    }

    private static Message message(String topic, String phase, int i) {
        Message m = new Message(topic, "Tag" + phase, Harness.utf8(phase + "-body-" + i));
        m.setKeys(Arrays.asList(phase + "-key-" + i, "alt-" + i));
        m.putUserProperty("phase", phase);
        m.putUserProperty("index", Integer.toString(i));
        m.putUserProperty("note", "caf\u00e9 \u2713 " + i);
        return m;
    }

    /** Sends {@code n} messages of {@code phase}; body -> the msgId each send returned. */
    private static Map<String, String> send(Harness h, DefaultMQProducer producer, String topic, String phase,
        int n) throws Exception {
        Map<String, String> ids = new LinkedHashMap<>();
        for (int i = 0; i < n; i++) {
            SendResult r = producer.send(message(topic, phase, i));
            if (r.getSendStatus() == SendStatus.SEND_OK) {
                ids.put(phase + "-body-" + i, r.getMsgId());
            }
        }
        h.check(phase + ": sends answered SEND_OK", ids.size() == n, ids.size());
        return ids;
    }

    private static MessageListenerConcurrently collector(List<MessageExt> into) {
        return (msgs, context) -> {
            into.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    private static List<String> bodies(List<MessageExt> msgs) {
        List<String> out = new ArrayList<>();
        for (MessageExt m : msgs) {
            out.add(Harness.text(m.getBody()));
        }
        return out;
    }

    private static Set<MessageQueue> queues(DefaultMQPushConsumer c, String topic) {
        Set<MessageQueue> out = new HashSet<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                out.add(mq);
            }
        }
        return out;
    }

    private static int count(List<MessageExt> msgs, String phase) {
        int n = 0;
        for (String b : bodies(msgs)) {
            n += b.startsWith(phase + "-") ? 1 : 0;
        }
        return n;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        int n = h.num("count", 6);
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        Map<String, String> sent = new TreeMap<>(send(h, producer, topic, "before", n));

        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = h.pushConsumer(group, "first");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(collector(got));
        Harness.startPush(consumer);
        sent.putAll(send(h, producer, topic, "after", n));

        boolean all = Harness.waitFor(() -> got.size() >= 2 * n, 15_000);
        Thread.sleep(500); // a duplicate would arrive now
        h.check("the consumer received every message", all, got.size());

        Map<String, MessageExt> byBody = new TreeMap<>();
        List<String> duplicates = new ArrayList<>();
        for (MessageExt m : got) {
            if (byBody.put(Harness.text(m.getBody()), m) != null) {
                duplicates.add(Harness.text(m.getBody()));
            }
        }
        h.check("each message was received once", duplicates.isEmpty() && byBody.keySet().equals(sent.keySet()),
            "duplicates " + duplicates + ", received " + byBody.keySet());

        List<String> wrong = new ArrayList<>();
        List<String> badIds = new ArrayList<>();
        for (Map.Entry<String, MessageExt> e : byBody.entrySet()) {
            MessageExt m = e.getValue();
            String[] parts = e.getKey().split("-body-");
            String phase = parts[0];
            String i = parts[1];
            Map<String, String> expected = new TreeMap<>();
            expected.put("phase", phase);
            expected.put("index", i);
            expected.put("note", "caf\u00e9 \u2713 " + i);
            if (!topic.equals(m.getTopic()) || !("Tag" + phase).equals(m.getTags())
                || !(phase + "-key-" + i + " alt-" + i).equals(m.getKeys())
                || !expected.equals(Harness.userProperties(m)) || m.getReconsumeTimes() != 0) {
                wrong.add(Harness.describe(m).toString());
            }
            String id = sent.get(e.getKey());
            if (id == null || !id.equals(m.getMsgId())) {
                badIds.add(e.getKey() + ": sent " + id + ", consumed " + m.getMsgId());
            }
        }
        h.check("topic, tags, keys and user properties as sent", wrong.isEmpty(), wrong);
        h.check("each msgId is the one its send returned", badIds.isEmpty(), badIds);

        Map<String, List<Long>> offsets = new TreeMap<>(); // JSON keys must be strings
        for (MessageExt m : got) {
            // a message's broker: the address that stored it (its store host)
            offsets.computeIfAbsent(h.queueName(String.valueOf(m.getStoreHost()), m.getQueueId()), q -> new ArrayList<>())
                .add(m.getQueueOffset());
        }
        boolean contiguous = true;
        for (List<Long> list : offsets.values()) {
            list.sort(null);
            for (int k = 0; k < list.size(); k++) {
                contiguous &= list.get(k) == k;
            }
        }
        h.check("queue offsets run from 0 without gaps in every queue", contiguous, offsets);

        // a second member of the group: the broker tells the first (NOTIFY_CONSUMER_IDS_CHANGED), both
        // list the group's consumers and split the queues, and what is sent then is consumed once
        List<MessageExt> mate = new CopyOnWriteArrayList<>();
        int half = h.num("queues", 4) / 2; // the topic's queues on all its brokers, an even number
        DefaultMQPushConsumer member = h.pushConsumer(group, "member");
        member.subscribe(topic, "*");
        member.registerMessageListener(collector(mate));
        Harness.startPush(member);
        boolean split = Harness.waitFor(() -> {
            Set<MessageQueue> a = queues(consumer, topic);
            Set<MessageQueue> b = queues(member, topic);
            Set<MessageQueue> both = new HashSet<>(a);
            both.addAll(b);
            return a.size() == half && b.size() == half && both.size() == 2 * half;
        }, 10_000);
        h.check("two consumers of the group split the queues " + half + " + " + half,
            split, queues(consumer, topic).size() + " + " + queues(member, topic).size());
        Harness.heartbeatSettled(consumer); // both rebalanced, raising their subVersions
        Harness.heartbeatSettled(member);
        Map<String, String> shared = send(h, producer, topic, "shared", 8);
        boolean sharedAll = Harness.waitFor(() -> count(got, "shared") + count(mate, "shared") >= 8, 10_000);
        Thread.sleep(300);
        List<String> sharedBodies = new ArrayList<>();
        for (String b : bodies(got)) {
            if (b.startsWith("shared-")) {
                sharedBodies.add(b);
            }
        }
        int firstGot = sharedBodies.size();
        for (String b : bodies(mate)) {
            if (b.startsWith("shared-")) {
                sharedBodies.add(b);
            }
        }
        sharedBodies.sort(null);
        h.check("each message sent then is consumed once by one of them, both taking some",
            sharedAll && sharedBodies.equals(new ArrayList<>(shared.keySet())) && firstGot > 0
                && firstGot < sharedBodies.size(), firstGot + " + " + (sharedBodies.size() - firstGot) + ": " + sharedBodies);

        Thread.sleep(300); // the last batch's offset is taken into the offset store after its listener returns
        member.shutdown();
        consumer.shutdown(); // persists the consumed offsets

        List<MessageExt> second = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer again = h.pushConsumer(group, "second");
        again.subscribe(topic, "*");
        again.registerMessageListener(collector(second));
        Harness.startPush(again);
        SendResult late = producer.send(message(topic, "late", 0));
        boolean gotLate = Harness.waitFor(() -> bodies(second).contains("late-body-0"), 10_000);
        Thread.sleep(300);
        h.check("a second consumer of the group gets only what was sent after the first stopped",
            gotLate && bodies(second).equals(List.of("late-body-0")), bodies(second));
        h.check("the late message has its msgId", !second.isEmpty() && late.getMsgId().equals(second.get(0).getMsgId()),
            late.getMsgId());
        again.shutdown();
        producer.shutdown();
    }
}
