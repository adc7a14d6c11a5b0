package compat;

import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

/**
 * Bodies of compressMsgBodyOverHowmuch (4 KiB) and more are compressed by the producer and stored with the
 * COMPRESSED flag; a push consumer and a pull consumer both get the original bytes of each, and of a
 * small body stored as it is.
 */
public final class Compressed {
    public static void main(String[] argv) {
        Harness.run(argv, Compressed::scenario);
    }

    /** name -> body: text that compresses well, random bytes that do not, and a small one. */
    private static Map<String, byte[]> bodies() {
        Map<String, byte[]> out = new LinkedHashMap<>();
        StringBuilder text = new StringBuilder();
        for (int i = 0; text.length() < 64 * 1024; i++) {
            text.append("line ").append(i).append(": the quick brown fox jumps over the lazy dog\n");
        }
        out.put("text-64k", Harness.utf8(text.toString()));
        byte[] random = new byte[300 * 1024];
        new Random(42).nextBytes(random);
        out.put("random-300k", random);
        byte[] justOver = new byte[4 * 1024 + 1];
        Arrays.fill(justOver, (byte) 'x');
        out.put("just-over-4k", justOver);
        byte[] exactly = new byte[4 * 1024];
        new Random(7).nextBytes(exactly);
        out.put("exactly-4k", exactly);
        out.put("just-under-4k", Arrays.copyOf(exactly, 4 * 1024 - 1));
        out.put("small", Harness.utf8("a small body \u2713"));
        return out;
    }

    private static String sha(byte[] b) throws Exception {
        StringBuilder s = new StringBuilder();
        for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) {
            s.append(String.format("%02x", x));
        }
        return s.substring(0, 16);
    }

    /** The compression type bits (8..10) of a message's sysFlag: 0 from 4.x producers, LZ4 = 1, ZLIB = 3. */
    private static int compressionType(MessageExt m) {
        return (m.getSysFlag() >> 8) & 7;
    }

    /**
     * Whether the stored message was compressed: a 4.x consumer keeps the COMPRESSED flag after inflating
     * the body, a 5.x one clears it but keeps the compression type bits the 5.x producer set.
     */
    private static boolean storedCompressed(MessageExt m) {
        return (m.getSysFlag() & MessageSysFlag.COMPRESSED_FLAG) != 0 || compressionType(m) != 0;
    }

    /** name -> "length/sha/compressed-flag" of what a consumer got. */
    private static Map<String, String> summary(List<MessageExt> msgs) throws Exception {
        Map<String, String> out = new TreeMap<>();
        for (MessageExt m : msgs) {
            boolean compressed = storedCompressed(m);
            out.merge(m.getKeys(), m.getBody().length + "/" + sha(m.getBody()) + "/" + compressed,
                (a, b) -> a + " AND AGAIN " + b);
        }
        return out;
    }

    /** A started producer compressing with {@code type}, or null where the client has no compress types. */
    private static DefaultMQProducer withCompressType(Harness h, String type) throws Exception {
        Class<?> types;
        java.lang.reflect.Method setter;
        try { // 4.9.8 has the enum (for its store) but no producer setter
            types = Class.forName("org.apache.rocketmq.common.compression.CompressionType");
            setter = DefaultMQProducer.class.getMethod("setCompressType", types);
        } catch (ClassNotFoundException | NoSuchMethodException e) {
            return null;
        }
        DefaultMQProducer producer = new DefaultMQProducer(h.str("producerGroup") + "_" + type);
        producer.setNamesrvAddr(h.namesrv());
        producer.setInstanceName("zip-" + type);
        setter.invoke(producer, types.getMethod("valueOf", String.class).invoke(null, type));
        producer.start();
        return producer;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        Map<String, byte[]> bodies = bodies();
        Map<String, String> expected = new TreeMap<>();
        for (Map.Entry<String, byte[]> e : bodies.entrySet()) {
            boolean compressed = e.getValue().length >= 4 * 1024; // the producer's rule
            expected.put(e.getKey(), e.getValue().length + "/" + sha(e.getValue()) + "/" + compressed);
        }

        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        List<String> sendProblems = new ArrayList<>();
        Map<String, String> idByKey = new TreeMap<>();
        for (Map.Entry<String, byte[]> e : bodies.entrySet()) {
            Message m = new Message(topic, "TagZip", e.getKey(), e.getValue());
            m.putUserProperty("size", Integer.toString(e.getValue().length));
            SendResult r = producer.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                sendProblems.add(e.getKey() + ": " + r.getSendStatus());
            }
            idByKey.put(e.getKey(), r.getMsgId());
        }
        producer.shutdown();

        // The 5.x producer also compresses with LZ4 (setCompressType, absent from 4.x; ZSTD needs a native
        // library the client jar lacks for this platform), flagging
        // the type in the message's sysFlag.
        for (String type : new String[] {"LZ4"}) {
            DefaultMQProducer typed = withCompressType(h, type);
            if (typed == null) {
                continue;
            }
            for (String name : new String[] {"text-64k", "random-300k", "small"}) {
                byte[] body = bodies.get(name);
                String key = type + "-" + name;
                Message m = new Message(topic, "TagZip", key, body);
                m.putUserProperty("size", Integer.toString(body.length));
                SendResult r = typed.send(m);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    sendProblems.add(key + ": " + r.getSendStatus());
                }
                idByKey.put(key, r.getMsgId());
                expected.put(key, body.length + "/" + sha(body) + "/" + (body.length >= 4 * 1024));
            }
            typed.shutdown();
        }
        h.put("sent", expected.keySet());
        h.check("every send answered SEND_OK", sendProblems.isEmpty(), sendProblems);

        List<MessageExt> pushed = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer push = h.pushConsumer(h.str("group"), "zip-push");
        push.subscribe(topic, "*");
        push.registerMessageListener((org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently)
            (msgs, context) -> {
                pushed.addAll(msgs);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        Harness.startPush(push);
        Harness.waitFor(() -> pushed.size() >= expected.size(), 15_000);
        Thread.sleep(300);
        push.shutdown();
        Map<String, String> gotPush = summary(pushed);
        h.check("push: each body arrives once as sent (length/sha256/stored compressed)",
            gotPush.equals(expected) && pushed.size() == expected.size(), gotPush);

        List<String> other = new ArrayList<>();
        for (MessageExt m : pushed) {
            if (!"TagZip".equals(m.getTags()) || !idByKey.getOrDefault(m.getKeys(), "").equals(m.getMsgId())
                || !Integer.toString(m.getBody().length).equals(m.getUserProperty("size"))) {
                other.add(m.getKeys() + ": tags " + m.getTags() + ", msgId " + m.getMsgId() + ", size "
                    + m.getUserProperty("size"));
            }
        }
        h.check("push: tags, user properties and msgIds as sent", other.isEmpty() && !pushed.isEmpty(), other);
        if (idByKey.containsKey("LZ4-text-64k")) {
            Map<String, Integer> types = new TreeMap<>();
            for (MessageExt m : pushed) {
                types.put(m.getKeys(), compressionType(m));
            }
            h.check("5.x: compressed messages carry their compression type in sysFlag (LZ4 1, ZLIB 3)",
                Integer.valueOf(1).equals(types.get("LZ4-text-64k")) && Integer.valueOf(3).equals(types.get("text-64k"))
                    && Integer.valueOf(0).equals(types.get("small")), types);
        }

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group2"));
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("zip-pull");
        pull.start();
        List<MessageExt> pulled = Harness.drain(pull, topic, expected.size(), 10_000);
        pull.shutdown();
        Map<String, String> gotPull = summary(pulled);
        h.check("pull: each body arrives once as sent (length/sha256/stored compressed)",
            gotPull.equals(expected) && pulled.size() == expected.size(), gotPull);
    }
}
