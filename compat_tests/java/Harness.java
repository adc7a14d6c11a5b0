package compat;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * What every compat program shares: its JSON argument, named checks, and the one line
 * {@code RESULT {"checks": [...], "data": {...}}} the pytest wrapper reads (or
 * {@code RESULT {"exception": ...}} when the program itself failed).
 */
public final class Harness {
    public interface Body {
        void run(Harness h) throws Exception;
    }

    public final JSONObject args;
    private final JSONArray checks = new JSONArray();
    private final JSONObject data = new JSONObject(true);

    private Harness(JSONObject args) {
        this.args = args;
    }

    public static void run(String[] argv, Body body) {
        Harness h = new Harness(argv.length > 0 ? JSON.parseObject(argv[0]) : new JSONObject());
        JSONObject out = new JSONObject(true);
        try {
            body.run(h);
            out.put("checks", h.checks);
            out.put("data", h.data);
        } catch (Throwable e) {
            StringWriter trace = new StringWriter();
            e.printStackTrace(new PrintWriter(trace));
            out.put("exception", e.toString());
            out.put("traceback", trace.toString());
            out.put("checks", h.checks);
        }
        System.out.println("RESULT " + JSON.toJSONString(out));
        System.out.flush();
        Runtime.getRuntime().halt(0); // client threads must not keep the program alive
    }

    public String str(String key) {
        String value = args.getString(key);
        if (value == null) {
            throw new IllegalArgumentException("missing argument " + key);
        }
        return value;
    }

    public int num(String key, int fallback) {
        Integer value = args.getInteger(key);
        return value == null ? fallback : value;
    }

    public String namesrv() {
        return str("namesrv");
    }

    /**
     * A queue's name in the checks' details: "queue" + its id, and on a topic over several brokers
     * (argument "brokers" given) its broker too, as queue ids repeat from one broker to the next.
     */
    public String queueName(String brokerName, int queueId) {
        return args.containsKey("brokers") ? brokerName + "/queue" + queueId : "queue" + queueId;
    }

    /** A check the wrapper compares broker by broker: its name, whether it held, and what was seen. */
    public boolean check(String name, boolean ok, Object detail) {
        JSONObject c = new JSONObject(true);
        c.put("name", name);
        c.put("ok", ok);
        c.put("detail", detail);
        checks.add(c);
        return ok;
    }

    public void put(String key, Object value) {
        data.put(key, value);
    }

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    public static String text(byte[] body) {
        return new String(body, StandardCharsets.UTF_8);
    }

    public static boolean waitFor(BooleanSupplier condition, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            Thread.sleep(50);
        }
        return condition.getAsBoolean();
    }

    /** The user properties of a message: everything but the keys the client and broker add. */
    public static Map<String, String> userProperties(MessageExt m) {
        Map<String, String> user = new TreeMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) {
                user.put(e.getKey(), e.getValue());
            }
        }
        return user;
    }

    /** What a consumer saw of one message, for comparing with what was sent. */
    public static Map<String, Object> describe(MessageExt m) {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("topic", m.getTopic());
        d.put("queueId", m.getQueueId());
        d.put("queueOffset", m.getQueueOffset());
        d.put("tags", m.getTags());
        d.put("keys", m.getKeys());
        d.put("body", text(m.getBody()));
        d.put("msgId", m.getMsgId());
        d.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        d.put("reconsumeTimes", m.getReconsumeTimes());
        d.put("user", userProperties(m));
        return d;
    }

    /** Every message now stored in ``topic`` (all queues, from offset 0), read with PULL_MESSAGE. */
    public static List<MessageExt> drain(DefaultMQPullConsumer pull, String topic, int expected, long timeoutMs)
        throws Exception {
        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        Collection<MessageQueue> queues = pull.fetchSubscribeMessageQueues(topic);
        Map<MessageQueue, Long> next = new LinkedHashMap<>();
        for (MessageQueue mq : queues) {
            next.put(mq, 0L);
        }
        while (got.size() < expected && System.currentTimeMillis() < deadline) {
            boolean any = false;
            for (MessageQueue mq : queues) {
                PullResult r = pull.pull(mq, "*", next.get(mq), 32);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    got.addAll(r.getMsgFoundList());
                    any = true;
                }
                next.put(mq, r.getNextBeginOffset());
            }
            if (!any) {
                Thread.sleep(100);
            }
        }
        return got;
    }

    /** A started producer of {@code group} on the program's name server; a send may take 10 s (not 3). */
    public DefaultMQProducer producer(String group) throws MQClientException {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    /**
     * A push consumer of {@code group} (not started) that reads a new group from the first offset and
     * pulls without pause; {@code instance} keeps several clients of one program apart.
     */
    public DefaultMQPushConsumer pushConsumer(String group, String instance) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv());
        consumer.setInstanceName(instance);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPullInterval(0);
        consumer.setPersistConsumerOffsetInterval(1000);
        return consumer;
    }

    /**
     * Starts a push consumer, waits for its rebalance to take queues, then heartbeats until settled. A
     * rebalance that changes the consumer's queues raises its subscription's subVersion and heartbeats,
     * but skips that heartbeat while another holds the client's heartbeat lock (the one scheduled 1 s
     * after start, say): the broker keeps the older subVersion and answers every pull
     * SUBSCRIPTION_NOT_LATEST until the next scheduled heartbeat 30 s later. That client race hits any
     * broker.
     */
    public static void startPush(DefaultMQPushConsumer consumer) throws Exception {
        long started = System.currentTimeMillis();
        consumer.start();
        waitFor(() -> !consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty(),
            10_000);
        Thread.sleep(Math.max(0, started + 1200 - System.currentTimeMillis()));
        heartbeatSettled(consumer);
    }

    /** Heartbeats until the consumer's subscriptions kept their subVersions over two heartbeats. */
    public static void heartbeatSettled(DefaultMQPushConsumer consumer) throws Exception {
        String last = null;
        for (int sent = 0, stable = 0; stable < 2 && sent < 20; sent++) {
            consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
            Thread.sleep(150);
            List<String> versions = new ArrayList<>(); // SubscriptionData moved package in 5.x: its text
            for (Object sub : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getSubscriptionInner().values()) {
                versions.add(sub.toString()); // has the subVersion
            }
            versions.sort(null);
            stable = versions.toString().equals(last) ? stable + 1 : 0;
            last = versions.toString();
        }
    }
}
