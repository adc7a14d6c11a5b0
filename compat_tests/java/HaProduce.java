package compat;

import com.alibaba.fastjson.JSONArray;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * A producer for the master/slave runs: sync sends of bodies "PREFIX-i" through the name server,
 * each SEND_OK recorded as [body, msgId, brokerName, queueId, queueOffset,
 * offsetMsgId] ("sent"), every other
 * answer or exception counted by kind ("refused"). Arguments: "topic", "group", "count" (most
 * sends), "prefix", "stopFile" (stop once it exists, for a producer running throughout a test),
 * "pauseMs" between sends. The route is polled every second, so a broker's death or return is seen
 * quickly.
 */
public final class HaProduce {
    public static void main(String[] argv) {
        Harness.run(argv, HaProduce::scenario);
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String prefix = h.args.getString("prefix") == null ? "ha" : h.str("prefix");
        int count = h.num("count", 100);
        int pauseMs = h.num("pauseMs", 0);
        String stop = h.args.getString("stopFile");
        Path stopFile = stop == null ? null : Paths.get(stop);

        DefaultMQProducer producer = new DefaultMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.setPollNameServerInterval(1000);
        producer.setSendMsgTimeout(5000);
        producer.start();
        JSONArray sent = new JSONArray();
        Map<String, Integer> refused = new TreeMap<>();
        List<String> firstRefusals = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            if (stopFile != null && Files.exists(stopFile)) {
                break;
            }
            String body = prefix + "-" + i;
            Message msg = new Message(topic, "TagHa", "key-" + body, Harness.utf8(body));
            String why;
            try {
                SendResult r = producer.send(msg);
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    JSONArray row = new JSONArray();
                    row.add(body);
                    row.add(r.getMsgId());
                    row.add(r.getMessageQueue().getBrokerName());
                    row.add(r.getMessageQueue().getQueueId());
                    row.add(r.getQueueOffset());
                    row.add(r.getOffsetMsgId());
                    sent.add(row);
                    if (pauseMs > 0) {
                        Thread.sleep(pauseMs);
                    }
                    continue;
                }
                why = r.getSendStatus().toString();
                if (firstRefusals.size() < 5) {
                    firstRefusals.add(body + ": " + why);
                }
            } catch (Exception e) {
                why = e.getClass().getSimpleName();
                if (firstRefusals.size() < 5) {
                    firstRefusals.add(body + ": " + e);
                }
                Thread.sleep(200); // no route to a master: wait for the name server to list one again
            }
            refused.merge(why, 1, Integer::sum);
        }
        producer.shutdown();
        h.put("sent", sent);
        h.put("refused", refused);
        h.put("firstRefusals", firstRefusals);
        h.check("some sends answered SEND_OK", !sent.isEmpty(), new TreeMap<>(refused)); // no $ref
    }
}
