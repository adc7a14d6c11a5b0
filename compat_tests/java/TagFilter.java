package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Tag subscriptions: of a stream mixing TagA, TagB, TagC, TagD and untagged messages, a push
 * consumer subscribed to "TagA || TagB" gets exactly the TagA and TagB ones and one of another group
 * subscribed to "TagC" (sending it with each pull: postSubscriptionWhenPull) exactly the TagC ones, each once, with msgIds as sent; the first group,
 * resubscribed to "TagD", then gets the TagD message sent after and no other tag.
 */
public final class TagFilter {
    private static final String[] TAGS = {"TagA", "TagB", "TagC", "TagD", null};

    public static void main(String[] argv) {
        Harness.run(argv, TagFilter::scenario);
    }

    private static MessageListenerConcurrently collector(List<MessageExt> into) {
        return (msgs, context) -> {
            into.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    private static DefaultMQPushConsumer start(Harness h, String group, String topic, String expression,
        List<MessageExt> into, boolean postSubscription) throws Exception {
        DefaultMQPushConsumer c = h.pushConsumer(group, group);
        c.setPostSubscriptionWhenPull(postSubscription); // each pull carries its expression
        c.subscribe(topic, expression);
        c.registerMessageListener(collector(into));
        Harness.startPush(c);
        return c;
    }

    /** body -> msgId of what each consumer got; a second copy of a body is listed under "duplicates". */
    private static Map<String, String> received(List<MessageExt> msgs, List<String> duplicates) {
        Map<String, String> out = new TreeMap<>();
        for (MessageExt m : msgs) {
            String body = Harness.text(m.getBody());
            String tag = m.getTags() == null ? "none" : m.getTags();
            if (!body.startsWith(tag + "-")) {
                duplicates.add(body + " carries tag " + tag);
            }
            if (out.put(body, m.getMsgId()) != null) {
                duplicates.add(body);
            }
        }
        return out;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        int rounds = h.num("rounds", 4);
        List<MessageExt> ab = new CopyOnWriteArrayList<>();
        List<MessageExt> c = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumerAb = start(h, h.str("group"), topic, "TagA || TagB", ab, false);
        DefaultMQPushConsumer consumerC = start(h, h.str("group2"), topic, "TagC", c, true);

        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        Map<String, String> expectedAb = new TreeMap<>();
        Map<String, String> expectedC = new TreeMap<>();
        for (int i = 0; i < rounds; i++) {
            for (String tag : TAGS) {
                String body = (tag == null ? "none" : tag) + "-body-" + i;
                Message m = tag == null ? new Message(topic, Harness.utf8(body))
                    : new Message(topic, tag, Harness.utf8(body));
                SendResult r = producer.send(m);
                if ("TagA".equals(tag) || "TagB".equals(tag)) {
                    expectedAb.put(body, r.getMsgId());
                } else if ("TagC".equals(tag)) {
                    expectedC.put(body, r.getMsgId());
                }
            }
        }
        producer.shutdown();

        boolean done = Harness.waitFor(() -> ab.size() >= expectedAb.size() && c.size() >= expectedC.size(), 15_000);
        Thread.sleep(1000); // a message the filters should have dropped would arrive now
        List<String> wrongAb = new ArrayList<>();
        List<String> wrongC = new ArrayList<>();
        Map<String, String> gotAb = received(ab, wrongAb);
        Map<String, String> gotC = received(c, wrongC);
        h.check("\"TagA || TagB\" got exactly the TagA and TagB messages, once, with their msgIds",
            done && gotAb.equals(expectedAb) && wrongAb.isEmpty() && ab.size() == expectedAb.size(),
            "got " + new TreeSet<>(gotAb.keySet()) + ", wrong " + wrongAb);
        h.check("\"TagC\" (sent with each pull) got exactly the TagC messages, once, with their msgIds",
            done && gotC.equals(expectedC) && wrongC.isEmpty() && c.size() == expectedC.size(),
            "got " + new TreeSet<>(gotC.keySet()) + ", wrong " + wrongC);
        consumerAb.shutdown(); // commits offsets past the messages its filter skipped
        consumerC.shutdown();

        // the group now subscribes "TagD": the broker filters by the newer subscription. Whether the
        // TagD messages sent before come too depends on whether the long-polling check (every 5 s, on
        // either broker) moved the group's offsets past them before it stopped.
        List<MessageExt> d = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumerD = start(h, h.str("group"), topic, "TagD", d, false);
        DefaultMQProducer again = h.producer(h.str("producerGroup"));
        String lateId = null;
        for (String tag : TAGS) {
            String body = (tag == null ? "none" : tag) + "-late";
            SendResult r = again.send(tag == null ? new Message(topic, Harness.utf8(body))
                : new Message(topic, tag, Harness.utf8(body)));
            if ("TagD".equals(tag)) {
                lateId = r.getMsgId();
            }
        }
        again.shutdown();
        boolean gotD = Harness.waitFor(() -> received(d, new ArrayList<>()).containsKey("TagD-late"), 10_000);
        Thread.sleep(500);
        List<String> wrongD = new ArrayList<>();
        Map<String, String> receivedD = received(d, wrongD);
        boolean onlyD = receivedD.keySet().stream().allMatch(b -> b.startsWith("TagD-"));
        h.check("the group resubscribed to \"TagD\" gets the TagD message sent after, and no other tag",
            gotD && onlyD && wrongD.isEmpty() && lateId != null && lateId.equals(receivedD.get("TagD-late")),
            "got " + receivedD.keySet() + ", wrong " + wrongD);
        consumerD.shutdown();
    }
}
