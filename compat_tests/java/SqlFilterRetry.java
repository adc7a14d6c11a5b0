package compat;

import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Retry-topic messages under a SQL92 subscription: a push consumer of topic T with "a = 1" also
 * consumes its group's retry topic (subscribed "*"); messages put in that retry topic with
 * RETRY_TOPIC=T and a=1 / a=2 reach it as the broker's filterSupportRetry decides (on: the
 * original topic's expression is evaluated on them, so only a=1; off: both). The bodies received
 * are recorded.
 */
public final class SqlFilterRetry {
    public static void main(String[] argv) {
        Harness.run(argv, SqlFilterRetry::scenario);
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer push = h.pushConsumer(group, "push");
        push.subscribe(topic, MessageSelector.bySql("a = 1"));
        push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            got.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        Harness.startPush(push);

        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        producer.send(tagged(new Message(topic, Harness.utf8("direct-1")), "1"));
        producer.send(tagged(new Message(topic, Harness.utf8("direct-2")), "2"));
        String retryTopic = "%RETRY%" + group;
        for (String a : new String[] {"1", "2"}) {
            Message m = tagged(new Message(retryTopic, Harness.utf8("retry-" + a)), a);
            MessageAccessor.putProperty(m, "RETRY_TOPIC", topic);
            producer.send(m);
        }
        producer.shutdown();
        Harness.waitFor(() -> got.size() >= 3, 15_000);
        Thread.sleep(1500); // what the filters should drop would arrive by now
        Set<String> bodies = new TreeSet<>();
        for (MessageExt m : got) {
            bodies.add(Harness.text(m.getBody()));
        }
        h.check("the direct a=1 message and the retry a=1 message arrive",
            bodies.contains("direct-1") && bodies.contains("retry-1") && !bodies.contains("direct-2"),
            "got " + bodies);
        h.put("received", String.join(",", bodies));
        push.shutdown();
    }

    private static Message tagged(Message m, String a) {
        m.putUserProperty("a", a);
        return m;
    }
}
