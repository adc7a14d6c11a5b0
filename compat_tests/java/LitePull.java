package compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * DefaultLitePullConsumer in both modes. Assign: every queue assigned, queue 0 sought to offset 2,
 * poll returns exactly the messages from there on, each queue in offset order. Subscribe: the
 * rebalanced consumer polls every message once, commitSync takes the consumed offsets, they reach
 * the broker, and the group's next consumer polls only what is sent after. (The 5.x client pulls
 * with LITE_PULL_MESSAGE, which only brokers of 5.0 on serve.)
 */
public final class LitePull {
    public static void main(String[] argv) {
        Harness.run(argv, LitePull::scenario);
    }

    private static DefaultLitePullConsumer consumer(Harness h, String group, String instance) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(h.namesrv());
        c.setInstanceName(instance);
        c.setAutoCommit(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollTimeoutMillis(200);
        return c;
    }

    /** Polls until {@code expected} messages came, or nothing came for {@code idleMs}. */
    private static List<MessageExt> pollAll(DefaultLitePullConsumer c, int expected, long idleMs) {
        List<MessageExt> got = new ArrayList<>();
        long lastProgress = System.currentTimeMillis();
        while (got.size() < expected && System.currentTimeMillis() - lastProgress < idleMs) {
            List<MessageExt> batch = c.poll(200);
            if (!batch.isEmpty()) {
                got.addAll(batch);
                lastProgress = System.currentTimeMillis();
            }
        }
        got.addAll(c.poll(300)); // anything beyond the expected arrives now
        return got;
    }

    /** "q<queue>@<offset> <body>" of each message, in the order polled. */
    private static List<String> seen(List<MessageExt> msgs) {
        List<String> out = new ArrayList<>();
        for (MessageExt m : msgs) {
            out.add("q" + m.getQueueId() + "@" + m.getQueueOffset() + " " + Harness.text(m.getBody()));
        }
        return out;
    }

    /**
     * seek, tried up to 3 times: it interrupts the queue's pull task, and in the 5.x client an
     * interrupted request closes the connection it shares with seek's own GET_MIN_OFFSET, which then
     * fails (a client race, on any broker); the next try reconnects. A failing try changes nothing.
     */
    private static void seek(DefaultLitePullConsumer c, MessageQueue mq, long offset) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                c.seek(mq, offset);
                return;
            } catch (MQClientException e) {
                if (attempt == 3) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        int perQueue = h.num("perQueue", 4);
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        List<MessageQueue> queues = new ArrayList<>(producer.fetchPublishMessageQueues(topic));
        queues.sort(null);
        Map<String, String> idByBody = new TreeMap<>();
        for (int i = 0; i < perQueue; i++) {
            for (MessageQueue mq : queues) {
                String body = "q" + mq.getQueueId() + "-body-" + i;
                Message m = new Message(topic, "TagLite", "lite-key-" + i, Harness.utf8(body));
                m.putUserProperty("queue", Integer.toString(mq.getQueueId()));
                SendResult r = producer.send(m, mq);
                idByBody.put(body, r.getMsgId());
            }
        }
        int total = perQueue * queues.size();

        // assign + seek
        DefaultLitePullConsumer assigned = consumer(h, h.str("group"), "lite-assign");
        assigned.start();
        Collection<MessageQueue> mqs = assigned.fetchMessageQueues(topic);
        h.check("fetchMessageQueues lists every queue", mqs.size() == queues.size(), mqs.toString());
        assigned.assign(mqs);
        // Every queue's first pull (from the first offset) is polled before the seeks: a pull from
        // the old offset that lands after seek has started its own pull task would deliver the
        // queue twice (a client race, on any broker). After it each pull task waits in a long
        // poll at the queue's end, which no message reaches; paused, no new task pulls before all
        // seeks are made.
        List<String> fromFirst = seen(pollAll(assigned, total, 4_000));
        Set<String> everyMessage = new TreeSet<>();
        for (MessageQueue mq : queues) {
            for (int i = 0; i < perQueue; i++) {
                everyMessage.add("q" + mq.getQueueId() + "@" + i + " q" + mq.getQueueId() + "-body-" + i);
            }
        }
        h.check("assign: poll returns every message from the first offsets, once",
            fromFirst.size() == everyMessage.size() && new TreeSet<>(fromFirst).equals(everyMessage), fromFirst);
        assigned.pause(mqs);
        for (MessageQueue mq : mqs) {
            seek(assigned, mq, mq.getQueueId() == 0 ? 2 : 0);
        }
        assigned.resume(mqs);
        List<MessageExt> got = pollAll(assigned, total - 2, 4_000);
        Set<String> expected = new TreeSet<>();
        for (MessageQueue mq : queues) {
            for (int i = mq.getQueueId() == 0 ? 2 : 0; i < perQueue; i++) {
                expected.add("q" + mq.getQueueId() + "@" + i + " q" + mq.getQueueId() + "-body-" + i);
            }
        }
        List<String> polled = seen(got);
        h.check("assign + seek: poll returns every message from the sought offsets, once",
            polled.size() == expected.size() && new TreeSet<>(polled).equals(expected), polled);
        Map<Integer, Long> last = new TreeMap<>();
        boolean ordered = true;
        List<String> wrong = new ArrayList<>();
        for (MessageExt m : got) {
            Long before = last.put(m.getQueueId(), m.getQueueOffset());
            ordered &= before == null || before < m.getQueueOffset();
            String body = Harness.text(m.getBody());
            if (!"TagLite".equals(m.getTags()) || !Integer.toString(m.getQueueId()).equals(m.getUserProperty("queue"))
                || !idByBody.getOrDefault(body, "").equals(m.getMsgId())) {
                wrong.add(Harness.describe(m).toString());
            }
        }
        h.check("assign: each queue's messages come in offset order", ordered && !got.isEmpty(), polled);
        h.check("assign: tags, user properties and msgIds as sent", wrong.isEmpty() && !got.isEmpty(), wrong);
        assigned.shutdown();

        // subscribe + commitSync
        String group2 = h.str("group2");
        DefaultLitePullConsumer subscribed = consumer(h, group2, "lite-subscribe");
        subscribed.subscribe(topic, "*");
        long subscribedAt = System.currentTimeMillis();
        subscribed.start();
        // a client that polled nothing in assign mode gets less time here (the 5.x client on 4.9.8)
        List<MessageExt> all = pollAll(subscribed, total, got.isEmpty() ? 2_000 : 6_000);
        List<String> bodies = new ArrayList<>();
        for (MessageExt m : all) {
            bodies.add(Harness.text(m.getBody()));
        }
        h.check("subscribe: poll returns every message once",
            bodies.size() == total && new TreeSet<>(bodies).equals(idByBody.keySet()), seen(all));
        subscribed.commitSync();
        Map<String, Long> committed = new TreeMap<>();
        for (MessageQueue mq : queues) {
            committed.put("queue" + mq.getQueueId(), subscribed.committed(mq));
        }
        h.check("commitSync: committed() is each queue's end", committed.values().stream()
            .allMatch(o -> o == perQueue) && committed.size() == queues.size(), committed);
        subscribed.commit(subscribed.assignment(), true); // and to the broker now

        DefaultMQPullConsumer reader = new DefaultMQPullConsumer(group2);
        reader.setNamesrvAddr(h.namesrv());
        reader.setInstanceName("offset-reader");
        reader.start();
        Map<String, Long> stored = new TreeMap<>();
        // The 4.9.8 broker can drop one of these: the group's first commits arrive together, and
        // its ConsumerOffsetManager creates the topic@group map with get-then-put, so two threads
        // each put a fresh map and one queue's offset is lost. The client sends every offset again
        // from its persist timer (first run 10 s after start, then every 5 s), hence the window.
        boolean reached = Harness.waitFor(() -> {
            for (MessageQueue mq : queues) {
                try {
                    stored.put("queue" + mq.getQueueId(), reader.fetchConsumeOffset(mq, true));
                } catch (Exception e) {
                    stored.put("queue" + mq.getQueueId(), -2L);
                }
            }
            return stored.values().stream().allMatch(o -> o == perQueue);
        }, all.isEmpty() ? 0 : Math.max(8_000, subscribedAt + 16_000 - System.currentTimeMillis()));
        h.check("the committed offsets reach the broker", reached, stored);
        reader.shutdown();
        subscribed.shutdown();

        DefaultLitePullConsumer next = consumer(h, group2, "lite-next");
        next.subscribe(topic, "*");
        next.start();
        List<MessageExt> later = new ArrayList<>();
        if (!all.isEmpty()) { // the client pulls at all on this broker
            Thread.sleep(1000);
            producer.send(new Message(topic, "TagLite", Harness.utf8("late-body")));
            later = pollAll(next, 1, 4_000);
        }
        List<String> lateBodies = new ArrayList<>();
        for (MessageExt m : later) {
            lateBodies.add(Harness.text(m.getBody()));
        }
        h.check("the group's next consumer polls only what was sent after the commit",
            lateBodies.equals(List.of("late-body")), seen(later));
        next.shutdown();
        producer.shutdown();
    }
}
