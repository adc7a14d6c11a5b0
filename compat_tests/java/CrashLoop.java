package compat;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A client that keeps working while the broker is killed and restarted under it, and writes down
 * what it was told as it goes (one line per event, flushed at once, so a record survives the
 * program being stopped at any point). Runs until the file named by "stop" exists.
 *
 * <p>"role": "produce": sync sends of "prefix-N" bodies, no client-side retry (a retried send that
 * the broker had stored would be a second copy of one body); each SEND_OK is written as
 * {@code msgId queueId queueOffset body}. A failed send is counted and the next one has a new body.
 *
 * <p>"role": "consume": a push consumer (from the first offset, offsets committed every second)
 * writes each delivered message as {@code queueId queueOffset msgId body}.
 */
public final class CrashLoop {
    public static void main(String[] argv) {
        Harness.run(argv, CrashLoop::scenario);
    }

    private static void append(OutputStream out, String line) throws IOException {
        synchronized (out) {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        }
    }

    static void scenario(Harness h) throws Exception {
        File stop = new File(h.str("stop"));
        try (OutputStream out = new FileOutputStream(h.str("out"), true)) {
            if (h.str("role").equals("produce")) {
                produce(h, stop, out);
            } else {
                consume(h, stop, out);
            }
        }
    }

    private static void produce(Harness h, File stop, OutputStream out) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.setInstanceName(h.str("prefix"));
        producer.setSendMsgTimeout(h.num("timeoutMs", 3000));
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        String topic = h.str("topic");
        String prefix = h.str("prefix");
        long ok = 0;
        long failed = 0;
        for (long i = 0; !stop.exists(); i++) {
            String body = prefix + "-" + i;
            try {
                SendResult r = producer.send(new Message(topic, "TagC", body, Harness.utf8(body)));
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    append(out, r.getMsgId() + " " + r.getMessageQueue().getQueueId() + " "
                        + r.getQueueOffset() + " " + body);
                    ok++;
                } else {
                    failed++;
                }
            } catch (Exception e) {
                failed++;
                Thread.sleep(50);
            }
        }
        producer.shutdown();
        h.put("sendOk", ok);
        h.put("sendFailed", failed);
        h.check("some sends answered SEND_OK", ok > 0, ok);
    }

    private static void consume(Harness h, File stop, OutputStream out) throws Exception {
        AtomicLong delivered = new AtomicLong();
        MessageListenerConcurrently listener = (msgs, context) -> {
            try {
                for (MessageExt m : msgs) {
                    append(out, m.getQueueId() + " " + m.getQueueOffset() + " " + m.getMsgId() + " "
                        + Harness.text(m.getBody()));
                    delivered.incrementAndGet();
                }
            } catch (IOException e) {
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer consumer = null;
        for (int attempt = 1; consumer == null; attempt++) {
            // start() reads the route at once: on a loaded machine that may time out (then start again)
            DefaultMQPushConsumer c = h.pushConsumer(h.str("group"), h.str("prefix"));
            c.subscribe(h.str("topic"), "*");
            c.registerMessageListener(listener);
            try {
                c.start();
                consumer = c;
            } catch (IllegalStateException e) {
                c.shutdown();
                if (attempt == 10) {
                    throw e;
                }
                Thread.sleep(1000);
            }
        }
        while (!stop.exists()) {
            Thread.sleep(100);
        }
        consumer.shutdown(); // (commits its offsets)
        h.put("delivered", delivered.get());
        h.check("some messages delivered", delivered.get() > 0, delivered.get());
    }
}
