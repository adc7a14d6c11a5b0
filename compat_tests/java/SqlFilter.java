package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.IntPredicate;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * SQL92 subscriptions (MessageSelector.bySql) over user properties and TAGS: of twelve messages
 * (TagA/TagB alternating, a colour, and a number "a" on all but every fourth), a push consumer, a
 * pull consumer (each pull carrying its expression) and a subscribed lite-pull consumer each get
 * exactly the messages their expression is true for; a push consumer whose expression does not
 * compile fails to start with SUBSCRIPTION_PARSE_FAILED (the remark is recorded); a pull whose
 * expression does not compile is not refused (the broker builds no filter and delivers everything);
 * text after a whole expression is not read ("a LIKE 'x%'" is "a").
 */
public final class SqlFilter {
    private static final int COUNT = 12;
    private static final String[] COLORS = {"red", "green", "blue"};

    public static void main(String[] argv) {
        Harness.run(argv, SqlFilter::scenario);
    }

    private static boolean hasA(int i) {
        return i % 4 != 3;
    }

    private static Set<String> expected(IntPredicate p) {
        Set<String> out = new TreeSet<>();
        for (int i = 0; i < COUNT; i++) {
            if (p.test(i)) {
                out.add("m" + i);
            }
        }
        return out;
    }

    private static Set<String> bodies(List<MessageExt> msgs, List<String> duplicates) {
        Set<String> out = new TreeSet<>();
        for (MessageExt m : msgs) {
            if (!out.add(Harness.text(m.getBody()))) {
                duplicates.add(Harness.text(m.getBody()));
            }
        }
        return out;
    }

    private static List<MessageExt> pullAll(DefaultMQPullConsumer pull, String topic, MessageSelector selector,
        int expected, long timeoutMs) throws Exception {
        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        List<MessageQueue> queues = new ArrayList<>(pull.fetchSubscribeMessageQueues(topic));
        // the client refuses a non-TAG pull to a broker whose version it has not learnt from a heartbeat
        MQClientInstance client = MQClientManager.getInstance().getOrCreateMQClientInstance(pull);
        client.updateTopicRouteInfoFromNameServer(topic);
        client.sendHeartbeatToAllBrokerWithLock();
        long[] next = new long[queues.size()];
        boolean any = true;
        while ((got.size() < expected || any) && System.currentTimeMillis() < deadline) {
            any = false;
            for (int q = 0; q < queues.size(); q++) {
                PullResult r = pull.pull(queues.get(q), selector, next[q], 32);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    got.addAll(r.getMsgFoundList());
                    any = true;
                }
                next[q] = r.getNextBeginOffset();
            }
            if (!any && got.size() < expected) {
                Thread.sleep(100);
            }
        }
        return got;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        for (int i = 0; i < COUNT; i++) {
            Message m = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", Harness.utf8("m" + i));
            if (hasA(i)) {
                m.putUserProperty("a", Integer.toString(i));
            }
            m.putUserProperty("color", COLORS[i % 3]);
            producer.send(m);
        }
        producer.shutdown();

        // push: a heartbeat subscription, filtered by the broker's filter data on each pull
        String pushSql = "a BETWEEN 3 AND 8 AND color <> 'blue'";
        Set<String> pushWant = expected(i -> hasA(i) && i >= 3 && i <= 8 && i % 3 != 2);
        List<MessageExt> pushed = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer push = h.pushConsumer(h.str("group"), "push");
        push.subscribe(topic, MessageSelector.bySql(pushSql));
        push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            pushed.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        Harness.startPush(push);
        boolean done = Harness.waitFor(() -> pushed.size() >= pushWant.size(), 15_000);
        Thread.sleep(1000); // a message the filter should have dropped would arrive now
        List<String> dup = new ArrayList<>();
        Set<String> gotPush = bodies(pushed, dup);
        h.check("push " + pushSql + " got exactly its messages, once", done && gotPush.equals(pushWant) && dup.isEmpty(),
            "got " + gotPush + " want " + pushWant + " duplicates " + dup);
        h.put("push", new ArrayList<>(gotPush));
        push.shutdown();

        // pull: each pull carries the expression (subscription flag)
        String pullSql = "TAGS = 'TagA' OR color IN ('red', 'green')";
        Set<String> pullWant = expected(i -> i % 2 == 0 || i % 3 != 2);
        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group2"));
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("pull");
        pull.start();
        List<String> dupPull = new ArrayList<>();
        Set<String> gotPull = bodies(pullAll(pull, topic, MessageSelector.bySql(pullSql), pullWant.size(), 15_000),
            dupPull);
        h.check("pull " + pullSql + " got exactly its messages, once", gotPull.equals(pullWant) && dupPull.isEmpty(),
            "got " + gotPull + " want " + pullWant);
        h.put("pull", new ArrayList<>(gotPull));

        // a pull whose expression does not compile: no filter data, every message
        Set<String> all = expected(i -> true);
        Set<String> gotBadPull = bodies(pullAll(pull, topic, MessageSelector.bySql("a = NULL"), all.size(), 15_000),
            new ArrayList<>());
        h.check("a pull with an expression that does not compile (a = NULL) gets every message",
            gotBadPull.equals(all), "got " + gotBadPull);
        // 4.9.8's grammar reads one expression and ignores what follows: "a LIKE 'x%'" is "a", never true
        Set<String> gotLike = bodies(pullAll(pull, topic, MessageSelector.bySql("a LIKE 'x%'"), 0, 3_000),
            new ArrayList<>());
        h.check("a pull with a LIKE 'x%' (read as a) gets nothing", gotLike.isEmpty(), "got " + gotLike);
        pull.shutdown();

        // lite pull, subscribed: heartbeat subscription, pulls carry the expression
        String liteSql = "a IS NULL OR (a > 9 AND TAGS <> 'TagA') OR NOT (a < 11)";
        Set<String> liteWant = expected(i -> !hasA(i) || (i > 9 && i % 2 == 1) || i >= 11);
        DefaultLitePullConsumer lite = new DefaultLitePullConsumer(h.str("group3"));
        lite.setNamesrvAddr(h.namesrv());
        lite.setInstanceName("lite");
        lite.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        lite.setPollTimeoutMillis(200);
        lite.subscribe(topic, MessageSelector.bySql(liteSql));
        lite.start();
        List<MessageExt> polled = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 15_000;
        while (polled.size() < liteWant.size() && System.currentTimeMillis() < deadline) {
            polled.addAll(lite.poll(200));
        }
        polled.addAll(lite.poll(500));
        List<String> dupLite = new ArrayList<>();
        Set<String> gotLite = bodies(polled, dupLite);
        h.check("lite pull " + liteSql + " got exactly its messages, once", gotLite.equals(liteWant) && dupLite.isEmpty(),
            "got " + gotLite + " want " + liteWant);
        h.put("lite", new ArrayList<>(gotLite));
        lite.shutdown();

        // a push consumer whose expression does not compile: CHECK_CLIENT_CONFIG refuses it at start
        String[] refused = {"a = NULL", "'abc'", "a > 'x'", "a = 1 AND", "a IN (1)", "a # b", "a > 0.0", "(a = 1"};
        for (String bad : refused) {
            DefaultMQPushConsumer badPush = h.pushConsumer(h.str("group4"), "bad");
            badPush.subscribe(topic, MessageSelector.bySql(bad));
            badPush.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
                ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
            int code = 0;
            String remark = "";
            try {
                badPush.start();
            } catch (MQClientException e) {
                code = e.getResponseCode();
                remark = String.valueOf(e.getErrorMessage());
            } finally {
                badPush.shutdown();
            }
            h.check("a push consumer subscribing " + bad + " fails to start with SUBSCRIPTION_PARSE_FAILED",
                code == 23, "code " + code + " remark " + remark);
            h.put("remark " + bad, remark);
        }
        DefaultMQPushConsumer like = h.pushConsumer(h.str("group4"), "like");
        like.subscribe(topic, MessageSelector.bySql("a LIKE 'x%'"));
        like.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        String likeError = "";
        try {
            like.start();
        } catch (MQClientException e) {
            likeError = "code " + e.getResponseCode() + " " + e.getErrorMessage();
        } finally {
            like.shutdown();
        }
        h.check("a push consumer subscribing a LIKE 'x%' starts (the text after a is not read)",
            likeError.isEmpty(), likeError);
    }
}
