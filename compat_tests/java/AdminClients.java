package compat;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.InputStream;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * The live clients mqadmin's connection and status commands look at: a producer that sends
 * {@code count} keyed messages to {@code topic} (message i to queue i) and stays registered, and a
 * push consumer of {@code consumerGroup} that consumes them. Once everything is consumed it prints
 * one line {@code READY {"sent": [...], "consumed": n, "consumerClientId": id}} and keeps both
 * clients running until its stdin closes (or {@code lifetimeMs} passes), so the wrapper holds the
 * state while it runs its commands.
 */
public final class AdminClients {
    public static void main(String[] argv) throws Exception {
        JSONObject args = JSON.parseObject(argv[0]);
        String namesrv = args.getString("namesrv");
        String topic = args.getString("topic");
        int count = args.getIntValue("count");
        long lifetimeMs = args.containsKey("lifetimeMs") ? args.getLongValue("lifetimeMs") : 240_000L;

        AtomicInteger consumed = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args.getString("consumerGroup"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            consumed.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(args.getString("producerGroup"));
        producer.setNamesrvAddr(namesrv);
        producer.start();
        JSONArray sent = new JSONArray();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "TagA", "key-" + i, Harness.utf8("body-" + i));
            SendResult r = producer.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), i);
            JSONObject s = new JSONObject(true);
            s.put("status", r.getSendStatus().name());
            s.put("msgId", r.getMsgId());
            s.put("offsetMsgId", r.getOffsetMsgId());
            s.put("queueId", r.getMessageQueue().getQueueId());
            s.put("queueOffset", r.getQueueOffset());
            s.put("key", "key-" + i);
            sent.add(s);
        }
        Harness.waitFor(() -> consumed.get() >= count, 30_000);

        JSONObject ready = new JSONObject(true);
        ready.put("sent", sent);
        ready.put("consumed", consumed.get());
        ready.put("consumerClientId", consumer.buildMQClientId());
        System.out.println("READY " + JSON.toJSONString(ready));
        System.out.flush();

        Thread reader = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) {
                    // wait for the wrapper to close stdin
                }
            } catch (Exception ignored) {
                // a closed pipe ends the wait too
            }
        });
        reader.setDaemon(true);
        reader.start();
        reader.join(lifetimeMs);
        producer.shutdown();
        consumer.shutdown();
        Runtime.getRuntime().halt(0);
    }
}
