package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Orderly messages: a MessageQueueSelector puts each order key's messages on one queue of several,
 * and a MessageListenerOrderly push consumer (which consumes a queue only once the broker granted it
 * the queue's lock with LOCK_BATCH_MQ) receives each key's messages in send order, each once. Once it
 * stops (UNLOCK_BATCH_MQ), the group's next orderly consumer locks the queues at once.
 */
public final class PushOrderly {
    public static void main(String[] argv) {
        Harness.run(argv, PushOrderly::scenario);
    }

    /** Order key k goes to queue k mod the queue count. */
    private static final MessageQueueSelector BY_ORDER_KEY = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        int keys = h.num("keys", 6);
        int perKey = h.num("perKey", 5);
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));

        Map<String, Integer> queueOfKey = new TreeMap<>();
        Map<String, String> idByBody = new TreeMap<>();
        boolean sendsOk = true;
        boolean oneQueuePerKey = true;
        int half = perKey / 2;
        for (int i = 0; i < half; i++) {
            sendsOk &= sendRound(producer, topic, keys, i, queueOfKey, idByBody);
        }

        Map<String, List<String>> seen = new ConcurrentHashMap<>(); // order key -> bodies as received
        Map<String, List<Integer>> seenQueues = new ConcurrentHashMap<>();
        AtomicInteger received = new AtomicInteger();
        Map<String, String> consumedIds = new ConcurrentHashMap<>(); // a message may arrive before its send returns
        DefaultMQPushConsumer consumer = h.pushConsumer(h.str("group"), "orderly");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt m : msgs) {
                String key = m.getKeys();
                seen.computeIfAbsent(key, k -> new ArrayList<>()).add(Harness.text(m.getBody()));
                seenQueues.computeIfAbsent(key, k -> new ArrayList<>()).add(m.getQueueId());
                consumedIds.put(Harness.text(m.getBody()), m.getMsgId());
                received.incrementAndGet();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        Harness.startPush(consumer);
        for (int i = half; i < perKey; i++) {
            sendsOk &= sendRound(producer, topic, keys, i, queueOfKey, idByBody);
        }
        h.check("orderly sends answered SEND_OK", sendsOk && idByBody.size() == keys * perKey, idByBody.size());

        boolean all = Harness.waitFor(() -> received.get() >= keys * perKey, 20_000);
        Thread.sleep(500); // a duplicate would arrive now
        h.check("every message was received once", all && received.get() == keys * perKey, received.get());

        List<String> outOfOrder = new ArrayList<>();
        for (int k = 0; k < keys; k++) {
            String key = "order-" + k;
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < perKey; i++) {
                expected.add(key + "-step-" + i);
            }
            List<String> got = seen.getOrDefault(key, List.of());
            if (!expected.equals(got)) {
                outOfOrder.add(key + ": " + got);
            }
            for (Integer q : seenQueues.getOrDefault(key, List.of())) {
                oneQueuePerKey &= q.equals(queueOfKey.get(key));
            }
        }
        h.check("each order key's messages arrived in send order", outOfOrder.isEmpty(), outOfOrder);
        h.check("each order key's messages came from the queue the selector chose", oneQueuePerKey, seenQueues);
        List<String> badIds = new ArrayList<>();
        for (Map.Entry<String, String> e : consumedIds.entrySet()) {
            String id = idByBody.get(e.getKey());
            if (id == null || !id.equals(e.getValue())) {
                badIds.add(e.getKey() + ": sent " + id + ", consumed " + e.getValue());
            }
        }
        h.check("each msgId is the one its send returned", badIds.isEmpty() && !consumedIds.isEmpty(), badIds);

        Map<String, Boolean> locked = new TreeMap<>();
        for (Map.Entry<MessageQueue, ProcessQueue> e
            : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
            locked.put(h.queueName(e.getKey().getBrokerName(), e.getKey().getQueueId()), e.getValue().isLocked());
        }
        h.check("the broker locked every queue for the consumer",
            locked.size() == h.num("queues", 4) && !locked.containsValue(false), locked);
        consumer.shutdown(); // unlocks its queues (UNLOCK_BATCH_MQ)

        // the group's next orderly consumer (another client id) gets the locks at once, not after the
        // broker's 60 s lock expiry, and consumes what is sent now
        Map<String, List<String>> next = new ConcurrentHashMap<>();
        DefaultMQPushConsumer successor = h.pushConsumer(h.str("group"), "orderly-next");
        successor.subscribe(topic, "*");
        successor.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt m : msgs) {
                next.computeIfAbsent(m.getKeys(), k -> new ArrayList<>()).add(Harness.text(m.getBody()));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        Harness.startPush(successor);
        for (int k = 0; k < keys; k++) {
            producer.send(new Message(topic, "TagOrder", "order-" + k, Harness.utf8("order-" + k + "-late")),
                BY_ORDER_KEY, k);
        }
        boolean tookOver = Harness.waitFor(() -> next.values().stream().mapToInt(List::size).sum() >= keys, 10_000);
        Thread.sleep(300);
        Map<String, Boolean> nextLocked = new TreeMap<>();
        for (Map.Entry<MessageQueue, ProcessQueue> e
            : successor.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet()) {
            nextLocked.put(h.queueName(e.getKey().getBrokerName(), e.getKey().getQueueId()), e.getValue().isLocked());
        }
        boolean onlyLate = next.size() == keys
            && next.entrySet().stream().allMatch(e -> e.getValue().equals(List.of(e.getKey() + "-late")));
        h.check("after the consumer stopped, the group's next one locks every queue and gets only the new messages",
            tookOver && onlyLate && nextLocked.size() == h.num("queues", 4) && !nextLocked.containsValue(false),
            "locked " + nextLocked + ", got " + new TreeMap<>(next));
        successor.shutdown();
        producer.shutdown();
    }

    /** Step {@code i} of every order key; records the queue each key went to and the msgIds. */
    private static boolean sendRound(DefaultMQProducer producer, String topic, int keys, int i,
        Map<String, Integer> queueOfKey, Map<String, String> idByBody) throws Exception {
        boolean ok = true;
        for (int k = 0; k < keys; k++) {
            String key = "order-" + k;
            String body = key + "-step-" + i;
            SendResult r = producer.send(new Message(topic, "TagOrder", key, Harness.utf8(body)), BY_ORDER_KEY, k);
            ok &= r.getSendStatus() == SendStatus.SEND_OK;
            Integer before = queueOfKey.put(key, r.getMessageQueue().getQueueId());
            ok &= before == null || before == r.getMessageQueue().getQueueId();
            idByBody.put(body, r.getMsgId());
        }
        return ok;
    }
}
