package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * DefaultMQPullConsumer: the topic's queues from the name server, pulls from chosen offsets in small
 * batches (contiguous queue offsets, nextBeginOffset, NO_NEW_MSG at the end and on an empty queue,
 * OFFSET_ILLEGAL past the end, at most 32 in-memory messages a pull), tag expressions within a queue
 * (which offsets match, where the next pull starts), a blocking pull woken by the next message (long
 * polling), and consumer offsets: a new group's, and one stored on the broker and read back.
 */
public final class PullConsumer {
    public static void main(String[] argv) {
        Harness.run(argv, PullConsumer::scenario);
    }

    private static List<Long> offsets(PullResult r) {
        List<Long> out = new ArrayList<>();
        if (r.getMsgFoundList() != null) {
            for (MessageExt m : r.getMsgFoundList()) {
                out.add(m.getQueueOffset());
            }
        }
        return out;
    }

    private static Map<String, Object> withOffsets(PullResult r) {
        Map<String, Object> d = status(r);
        d.put("offsets", offsets(r));
        return d;
    }

    private static Map<String, Object> status(PullResult r) {
        Map<String, Object> d = new TreeMap<>();
        d.put("status", r.getPullStatus().name());
        d.put("nextBeginOffset", r.getNextBeginOffset());
        d.put("minOffset", r.getMinOffset());
        d.put("maxOffset", r.getMaxOffset());
        d.put("found", r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size());
        return d;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        int queues = h.num("queues", 4);
        int n = h.num("count", 7);

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group);
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("pull-first");
        pull.start();
        Set<MessageQueue> mqs = pull.fetchSubscribeMessageQueues(topic);
        Map<Integer, MessageQueue> byId = new TreeMap<>();
        for (MessageQueue mq : mqs) {
            byId.put(mq.getQueueId(), mq);
        }
        h.check("fetchSubscribeMessageQueues lists every queue of the topic",
            byId.size() == queues && byId.keySet().equals(rangeSet(queues)), mqs.toString());
        MessageQueue full = byId.get(0);
        MessageQueue empty = byId.get(1);

        PullResult none = pull.pull(empty, "*", 0, 32);
        h.check("an empty queue pulled at offset 0 answers NO_NEW_MSG, next offset 0",
            none.getPullStatus() == PullStatus.NO_NEW_MSG && none.getNextBeginOffset() == 0, status(none));
        PullResult emptyPast = pull.pull(empty, "*", 5, 32);
        h.check("an empty queue pulled at offset 5 answers OFFSET_ILLEGAL, next offset 0",
            emptyPast.getPullStatus() == PullStatus.OFFSET_ILLEGAL && emptyPast.getNextBeginOffset() == 0,
            status(emptyPast));

        long fresh = pull.fetchConsumeOffset(full, true);
        h.check("a new group's offset read from the broker is 0 on an empty queue", fresh == 0, fresh);

        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "TagPull", "pull-key-" + i, Harness.utf8("pull-body-" + i));
            m.putUserProperty("index", Integer.toString(i));
            SendResult r = producer.send(m, full);
            ids.add(r.getMsgId());
        }
        producer.shutdown();
        dispatched(pull, full, n);

        DefaultMQPullConsumer fresh2 = new DefaultMQPullConsumer(h.str("group2"));
        fresh2.setNamesrvAddr(h.namesrv());
        fresh2.setInstanceName("pull-fresh");
        fresh2.start();
        long freshOnFull = fresh2.fetchConsumeOffset(full, true);
        fresh2.shutdown();
        h.check("a new group's offset read from the broker is 0 on a queue whose messages are in memory",
            freshOnFull == 0, freshOnFull);

        List<Map<String, Object>> steps = new ArrayList<>();
        List<MessageExt> got = new ArrayList<>();
        long offset = 0;
        boolean nextOk = true;
        for (int round = 0; round < n && offset < n; round++) {
            PullResult r = pull.pull(full, "*", offset, 3);
            steps.add(status(r));
            if (r.getPullStatus() != PullStatus.FOUND) {
                break;
            }
            got.addAll(r.getMsgFoundList());
            long last = r.getMsgFoundList().get(r.getMsgFoundList().size() - 1).getQueueOffset();
            nextOk &= r.getNextBeginOffset() == last + 1 && r.getMsgFoundList().size() <= 3;
            offset = r.getNextBeginOffset();
        }
        h.check("pulls of 3 from offset 0 return FOUND batches of at most 3, next offset after the last",
            nextOk && offset == n, steps);
        List<String> wrong = new ArrayList<>();
        for (int i = 0; i < got.size(); i++) {
            MessageExt m = got.get(i);
            if (m.getQueueOffset() != i || m.getQueueId() != 0 || !("pull-body-" + i).equals(Harness.text(m.getBody()))
                || !("pull-key-" + i).equals(m.getKeys()) || !"TagPull".equals(m.getTags())
                || !Integer.toString(i).equals(Harness.userProperties(m).get("index"))
                || !ids.get(i).equals(m.getMsgId())) {
                wrong.add(Harness.describe(m).toString());
            }
        }
        h.check("the messages come in send order at contiguous queue offsets, as sent",
            got.size() == n && wrong.isEmpty(), wrong);

        PullResult middle = pull.pull(full, "*", 4, 32);
        h.check("a pull from offset 4 starts at offset 4",
            middle.getPullStatus() == PullStatus.FOUND && middle.getMsgFoundList().size() == n - 4
                && middle.getMsgFoundList().get(0).getQueueOffset() == 4 && middle.getNextBeginOffset() == n,
            status(middle));
        PullResult end = pull.pull(full, "*", n, 32);
        h.check("a pull at the queue's end answers NO_NEW_MSG, next offset unchanged",
            end.getPullStatus() == PullStatus.NO_NEW_MSG && end.getNextBeginOffset() == n
                && end.getMaxOffset() == n && end.getMinOffset() == 0, status(end));
        PullResult past = pull.pull(full, "*", n + 10, 32);
        h.check("a pull past the queue's end answers OFFSET_ILLEGAL, next offset the queue's max offset",
            past.getPullStatus() == PullStatus.OFFSET_ILLEGAL && past.getNextBeginOffset() == n, status(past));
        PullResult tagged = pull.pull(full, "OtherTag", 0, 32);
        h.check("a pull for a tag no message has finds nothing and moves past the scanned messages",
            tagged.getPullStatus() == PullStatus.NO_MATCHED_MSG && tagged.getNextBeginOffset() == n, status(tagged));
        h.check("minOffset / maxOffset of the queue", pull.minOffset(full) == 0 && pull.maxOffset(full) == n,
            pull.minOffset(full) + ".." + pull.maxOffset(full));

        MessageQueue big = byId.get(2);
        DefaultMQProducer batcher = h.producer(h.str("producerGroup") + "_batch");
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            batch.add(new Message(topic, "TagPull", Harness.utf8("batch-body-" + i)));
        }
        batcher.send(batch, big);
        batcher.shutdown();
        dispatched(pull, big, 40);
        PullResult capped = pull.pull(big, "*", 0, 64);
        h.check("a pull of up to 64 in-memory messages returns 32 (maxTransferCountOnMessageInMemory)",
            capped.getPullStatus() == PullStatus.FOUND && capped.getMsgFoundList().size() == 32
                && capped.getNextBeginOffset() == 32, status(capped));

        // tag filtering within a queue: TagA at even offsets, TagC at odd ones
        MessageQueue mixed = byId.get(3);
        DefaultMQProducer tagger = h.producer(h.str("producerGroup") + "_tags");
        for (int i = 0; i < 10; i++) {
            tagger.send(new Message(topic, i % 2 == 0 ? "TagA" : "TagC", Harness.utf8("mixed-body-" + i)), mixed);
        }
        tagger.shutdown();
        dispatched(pull, mixed, 10);
        PullResult firstTwo = pull.pull(mixed, "TagA", 0, 2);
        h.check("pull \"TagA\" max 2 from 0: offsets 0 and 2, next offset 3",
            offsets(firstTwo).equals(List.of(0L, 2L)) && firstTwo.getNextBeginOffset() == 3, withOffsets(firstTwo));
        PullResult rest = pull.pull(mixed, "TagA", 3, 32);
        h.check("pull \"TagA\" from 3: offsets 4, 6 and 8, next offset 10",
            offsets(rest).equals(List.of(4L, 6L, 8L)) && rest.getNextBeginOffset() == 10, withOffsets(rest));
        PullResult either = pull.pull(mixed, "TagC || TagA", 5, 32);
        h.check("pull \"TagC || TagA\" from 5: offsets 5 to 9, next offset 10",
            offsets(either).equals(List.of(5L, 6L, 7L, 8L, 9L)) && either.getNextBeginOffset() == 10,
            withOffsets(either));
        PullResult tailOnly = pull.pull(mixed, "TagA", 9, 32);
        h.check("pull \"TagA\" from 9 (a TagC): no match, next offset 10",
            tailOnly.getPullStatus() == PullStatus.NO_MATCHED_MSG && tailOnly.getNextBeginOffset() == 10,
            withOffsets(tailOnly));

        pull.updateConsumeOffset(full, 3);
        h.check("updateConsumeOffset is read back from memory", pull.fetchConsumeOffset(full, false) == 3,
            pull.fetchConsumeOffset(full, false));
        pull.getOffsetStore().updateConsumeOffsetToBroker(full, 3, false);
        long stored = pull.fetchConsumeOffset(full, true);
        h.check("an offset committed to the broker is read back from the broker", stored == 3, stored);

        pull.updateConsumeOffset(full, 5);
        pull.getOffsetStore().persist(full); // oneway, as the client's periodic persistence
        boolean persisted = Harness.waitFor(() -> readStored(pull, full) == 5, 5_000);
        h.check("an offset persisted oneway reaches the broker", persisted, readStored(pull, full));

        // long polling: a blocking pull at the end is held by the broker until a message arrives
        CompletableFuture<PullResult> waiting = CompletableFuture.supplyAsync(() -> {
            try {
                return pull.pullBlockIfNotFound(full, "*", n, 32);
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        });
        Thread.sleep(1000);
        boolean held = !waiting.isDone();
        long sentAt = System.currentTimeMillis();
        DefaultMQProducer late = h.producer(h.str("producerGroup") + "_late");
        SendResult lateSent = late.send(new Message(topic, "TagPull", Harness.utf8("late-body")), full);
        PullResult woke = waiting.get(15, TimeUnit.SECONDS);
        long wokeAfter = System.currentTimeMillis() - sentAt;
        late.shutdown();
        h.check("a blocking pull at the end waits, and returns the next message soon after it is sent",
            held && woke.getPullStatus() == PullStatus.FOUND && woke.getMsgFoundList().size() == 1
                && lateSent.getMsgId().equals(woke.getMsgFoundList().get(0).getMsgId()) && wokeAfter < 5_000,
            "held " + held + ", woke " + wokeAfter + " ms after the send: " + status(woke));

        DefaultMQPullConsumer other = new DefaultMQPullConsumer(group);
        other.setNamesrvAddr(h.namesrv());
        other.setInstanceName("pull-second");
        other.start();
        long seen = other.fetchConsumeOffset(full, true);
        h.check("another consumer of the group reads the committed offset", seen == 5, seen);
        other.shutdown();
        pull.shutdown();
    }

    /**
     * Waits until the queue holds {@code count} messages: a Java broker answers a send once the message
     * is in its CommitLog and adds it to the consume queue just after.
     */
    private static void dispatched(DefaultMQPullConsumer pull, MessageQueue mq, long count) throws Exception {
        Harness.waitFor(() -> {
            try {
                return pull.maxOffset(mq) >= count;
            } catch (Exception e) {
                return false;
            }
        }, 5_000);
    }

    private static long readStored(DefaultMQPullConsumer pull, MessageQueue mq) {
        try {
            return pull.fetchConsumeOffset(mq, true);
        } catch (Exception e) {
            return -2;
        }
    }

    private static Set<Integer> rangeSet(int n) {
        Set<Integer> s = new java.util.TreeSet<>();
        for (int i = 0; i < n; i++) {
            s.add(i);
        }
        return s;
    }
}
