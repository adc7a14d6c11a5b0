package compat;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashSet;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A push consumer for the master/slave runs: every delivery recorded as [body, msgId, queueId,
 * queueOffset, reconsumeTimes] ("got", repeats included). It runs until "expectFile" exists and
 * every body listed in it (a JSON array) has arrived, then "graceMs" longer (a repeat would show),
 * or until "timeoutMs". The route is polled every second, so the consumer turns to the slave soon
 * after the master is gone. Arguments: "topic", "group", "expectFile", "graceMs", "timeoutMs".
 */
public final class HaConsume {
    public static void main(String[] argv) {
        Harness.run(argv, HaConsume::scenario);
    }

    static void scenario(Harness h) throws Exception {
        Path expectFile = Paths.get(h.str("expectFile"));
        JSONArray got = new JSONArray();
        Set<String> bodies = new HashSet<>();
        DefaultMQPushConsumer consumer = h.pushConsumer(h.str("group"), "ha");
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(h.str("topic"), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            synchronized (got) {
                for (MessageExt m : msgs) {
                    String body = Harness.text(m.getBody());
                    JSONArray row = new JSONArray();
                    row.add(body);
                    row.add(m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                    row.add(m.getQueueId());
                    row.add(m.getQueueOffset());
                    row.add(m.getReconsumeTimes());
                    got.add(row);
                    bodies.add(body);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + h.num("timeoutMs", 60_000);
        boolean complete = false;
        while (!complete && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
            if (Files.exists(expectFile)) {
                Set<String> expected = new HashSet<>(JSON.parseArray(
                    new String(Files.readAllBytes(expectFile), StandardCharsets.UTF_8), String.class));
                synchronized (got) {
                    complete = bodies.containsAll(expected);
                }
            }
        }
        Thread.sleep(h.num("graceMs", 2000));
        consumer.shutdown(); // commits the consumed offsets to the broker
        synchronized (got) {
            h.put("got", got);
        }
        h.check("every expected body arrived", complete, bodies.size());
    }
}
