package compat;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A well-behaved producer and push consumer side by side: synchronous sends one after another until
 * {@code stopFile} exists (or {@code maxSeconds} pass), each send's completion time and latency kept;
 * then waits until the consumer has every message sent. {@code startedFile} is written once both
 * clients run, so the caller can time its own load against the sends.
 */
public final class SteadyLoad {
    public static void main(String[] argv) {
        Harness.run(argv, SteadyLoad::scenario);
    }

    private static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        int[] duplicates = {0};
        DefaultMQPushConsumer consumer = h.pushConsumer(h.str("group"), "steady-consumer");
        consumer.subscribe(topic, "*");
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!consumed.add(Harness.text(m.getBody()))) {
                    synchronized (duplicates) {
                        duplicates[0]++;
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        consumer.registerMessageListener(listener);
        Harness.startPush(consumer);
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        Files.write(Paths.get(h.str("startedFile")), Harness.utf8("started"));
        long deadline = System.currentTimeMillis() + 1000L * h.num("maxSeconds", 600);
        List<long[]> sends = new ArrayList<>();
        List<String> sent = new ArrayList<>();
        int failures = 0;
        String lastFailure = null;
        for (int i = 0; !Files.exists(Paths.get(h.str("stopFile"))) && System.currentTimeMillis() < deadline; i++) {
            String body = "steady-" + i;
            long begin = System.nanoTime();
            try {
                SendResult r = producer.send(new Message(topic, "steady", Harness.utf8(body)));
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    sends.add(new long[] {System.currentTimeMillis(), (System.nanoTime() - begin) / 1000});
                    sent.add(body);
                } else {
                    failures++;
                    lastFailure = r.getSendStatus().toString();
                }
            } catch (Exception e) {
                failures++;
                lastFailure = e.toString();
            }
        }
        Harness.waitFor(() -> consumed.containsAll(sent), 60_000);
        List<String> missing = new ArrayList<>();
        for (String body : sent) {
            if (!consumed.contains(body) && missing.size() < 20) {
                missing.add(body);
            }
        }
        h.check("every send answered SEND_OK", failures == 0, lastFailure);
        h.check("every message sent was consumed", missing.isEmpty(), missing);
        h.put("sends", sends);
        h.put("sent", sent.size());
        h.put("consumed", consumed.size());
        h.put("duplicates", duplicates[0]);
        h.put("failures", failures);
        consumer.shutdown();
        producer.shutdown();
    }
}
