package compat;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Rewinding a group by time: two waves of sends with a pause between; the group consumes both and
 * commits; searchOffset(mq, t) for a time t in the pause (close to the second wave) gives each
 * queue's first offset of the second wave; the group's offsets are set there (updateConsumeOffset,
 * then committed to the broker), and a push consumer of the group then receives exactly the second
 * wave, nothing of the first.
 */
public final class ResetByTime {
    public static void main(String[] argv) {
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        Harness.run(argv, ResetByTime::scenario);
    }

    static final int PER_QUEUE = 3;

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        DefaultMQProducer producer = new DefaultMQProducer(group + "_producer");
        producer.setNamesrvAddr(h.namesrv());
        producer.setSendMsgTimeout(10_000); // a loaded machine answers slowly
        producer.start();
        List<MessageQueue> queues = new ArrayList<>(producer.fetchPublishMessageQueues(topic));
        Collections.sort(queues);

        Map<MessageQueue, Long> firstOfWave2 = new HashMap<>();
        Map<MessageQueue, Long> maxOffset = new HashMap<>();
        boolean sendsOk = true;
        long pauseAt = 0;
        for (int wave = 1; wave <= 2; wave++) {
            if (wave == 2) {
                Thread.sleep(1500);
                pauseAt = System.currentTimeMillis();
                Thread.sleep(300);
            }
            for (MessageQueue mq : queues) {
                for (int i = 0; i < PER_QUEUE; i++) {
                    String body = "wave" + wave + "-q" + mq.getQueueId() + "-" + i;
                    SendResult r = producer.send(new Message(topic, "TagW" + wave, body, Harness.utf8(body)), mq);
                    sendsOk &= r.getSendStatus() == SendStatus.SEND_OK;
                    if (wave == 2 && i == 0) {
                        firstOfWave2.put(r.getMessageQueue(), r.getQueueOffset());
                    }
                    maxOffset.put(r.getMessageQueue(), r.getQueueOffset() + 1);
                }
            }
        }
        producer.shutdown();
        h.check("two waves of sends answered SEND_OK", sendsOk && firstOfWave2.size() == queues.size(), null);

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group);
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        int consumed = 0;
        for (MessageQueue mq : queues) {
            long offset = 0;
            long deadline = System.currentTimeMillis() + 10_000;
            while (offset < maxOffset.getOrDefault(mq, 0L) && System.currentTimeMillis() < deadline) {
                PullResult r = pull.pull(mq, "*", offset, 32);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    consumed += r.getMsgFoundList().size();
                }
                offset = r.getNextBeginOffset();
            }
            pull.updateConsumeOffset(mq, offset);
            pull.getOffsetStore().updateConsumeOffsetToBroker(mq, offset, false);
        }
        Map<String, Object> committed = new TreeMap<>();
        boolean allCommitted = true;
        for (MessageQueue mq : queues) {
            long c = pull.fetchConsumeOffset(mq, true);
            committed.put("q" + mq.getQueueId(), c);
            allCommitted &= c == maxOffset.get(mq);
        }
        h.check("the group consumed both waves and committed their end", consumed == 2 * PER_QUEUE * queues.size()
            && allCommitted, "consumed " + consumed + ", committed " + committed);

        Map<String, Object> found = new TreeMap<>();
        Map<String, Object> wanted = new TreeMap<>();
        Map<String, Object> edges = new TreeMap<>();
        boolean searchOk = true;
        for (MessageQueue mq : queues) {
            long at = pull.searchOffset(mq, pauseAt);
            found.put("q" + mq.getQueueId(), at);
            wanted.put("q" + mq.getQueueId(), firstOfWave2.get(mq));
            searchOk &= at == firstOfWave2.get(mq);
            edges.put("q" + mq.getQueueId() + " long ago", pull.searchOffset(mq, 1L));
            long inAnHour = System.currentTimeMillis() + 3_600_000L;
            edges.put("q" + mq.getQueueId() + " in an hour, from the end", pull.searchOffset(mq, inAnHour)
                - maxOffset.get(mq));
        }
        h.put("searchEdges", edges);
        h.check("searchOffset of a time in the pause is the first offset of the second wave", searchOk,
            "found " + found + ", wanted " + wanted);

        Map<String, Object> reset = new TreeMap<>();
        boolean resetOk = true;
        for (MessageQueue mq : queues) {
            long to = firstOfWave2.get(mq);
            pull.updateConsumeOffset(mq, to);
            pull.getOffsetStore().updateConsumeOffsetToBroker(mq, to, false);
            long c = pull.fetchConsumeOffset(mq, true);
            reset.put("q" + mq.getQueueId(), c);
            resetOk &= c == to;
        }
        h.check("the group's committed offsets now point at the second wave", resetOk, reset);
        pull.shutdown(); // leaves the group, so the push consumer below rebalances onto every queue

        List<String> bodies = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer push = new DefaultMQPushConsumer(group);
        push.setNamesrvAddr(h.namesrv());
        push.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        push.subscribe(topic, "*");
        push.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                bodies.add(Harness.text(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        Harness.startPush(push);
        int wave2 = PER_QUEUE * queues.size();
        Harness.waitFor(() -> bodies.size() >= wave2, 30_000);
        Thread.sleep(1000); // anything of the first wave would be here by now
        push.shutdown();

        TreeSet<String> expected = new TreeSet<>();
        for (MessageQueue mq : queues) {
            for (int i = 0; i < PER_QUEUE; i++) {
                expected.add("wave2-q" + mq.getQueueId() + "-" + i);
            }
        }
        List<String> got;
        synchronized (bodies) {
            got = new ArrayList<>(bodies);
        }
        Collections.sort(got);
        h.check("consumption restarted exactly at the second wave", got.equals(new ArrayList<>(expected)), got);
    }
}
