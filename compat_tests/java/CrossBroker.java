package compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * One topic served by two brokers of a cluster: the producer's route holds the queues of both,
 * sync sends spread over both (the broker each landed on is read from its SendResult), and a pull
 * consumer and a push consumer each receive every message, from the broker its send went to.
 * Arguments: "brokers", the two broker names the topic lives on; "orderly": push with an orderly
 * listener (queues locked on both brokers), each queue's messages then checked to come in order.
 */
public final class CrossBroker {
    public static void main(String[] argv) {
        Harness.run(argv, CrossBroker::scenario);
    }

    private static Set<String> brokersOf(Collection<MessageQueue> queues) {
        Set<String> names = new TreeSet<>();
        for (MessageQueue mq : queues) {
            names.add(mq.getBrokerName());
        }
        return names;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        int n = h.num("count", 16);
        Set<String> expected = new TreeSet<>(h.args.getJSONArray("brokers").toJavaList(String.class));

        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(h.namesrv());
        producer.start();
        List<MessageQueue> publish = producer.fetchPublishMessageQueues(topic);
        h.check("the producer's route holds the queues of both brokers", brokersOf(publish).equals(expected),
            publish.toString());

        Map<String, String> brokerByBody = new TreeMap<>(); // body -> broker its send landed on
        Map<String, Integer> sentPerBroker = new TreeMap<>();
        List<String> notOk = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String body = "cross-" + i;
            SendResult r = producer.send(new Message(topic, "TagX", "key-" + i, Harness.utf8(body)));
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                notOk.add(body + ": " + r.getSendStatus());
            }
            String broker = r.getMessageQueue().getBrokerName();
            brokerByBody.put(body, broker);
            sentPerBroker.merge(broker, 1, Integer::sum);
        }
        producer.shutdown();
        h.put("sentPerBroker", new TreeMap<>(sentPerBroker)); // a copy: fastjson writes a repeat as $ref
        h.check("sync sends answered SEND_OK", notOk.isEmpty(), notOk);
        h.check("sends landed on queues of both brokers", sentPerBroker.keySet().equals(expected), sentPerBroker);

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group + "_reader");
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        Set<MessageQueue> subscribe = pull.fetchSubscribeMessageQueues(topic);
        h.check("the pull consumer's route holds the queues of both brokers",
            brokersOf(subscribe).equals(expected), subscribe.toString());
        List<MessageExt> pulled = Harness.drain(pull, topic, n, 30_000);
        pull.shutdown();
        Map<String, Integer> pulledBodies = new TreeMap<>();
        for (MessageExt m : pulled) {
            pulledBodies.merge(Harness.text(m.getBody()), 1, Integer::sum);
        }
        h.check("the pull consumer read every message once", pulled.size() == n
            && pulledBodies.keySet().equals(brokerByBody.keySet()), pulledBodies);

        Map<String, List<String>> pushedFrom = new ConcurrentHashMap<>(); // body -> brokers it came from
        DefaultMQPushConsumer push = new DefaultMQPushConsumer(group + "_push");
        push.setNamesrvAddr(h.namesrv());
        push.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        push.subscribe(topic, "*");
        boolean orderly = h.args.getBooleanValue("orderly");
        Map<String, List<Long>> offsetsByQueue = new ConcurrentHashMap<>(); // "broker/queueId" -> offsets
        if (orderly) {
            push.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                MessageQueue mq = ctx.getMessageQueue();
                for (MessageExt m : msgs) {
                    pushedFrom.computeIfAbsent(Harness.text(m.getBody()), k -> new ArrayList<>())
                        .add(mq.getBrokerName());
                    offsetsByQueue.computeIfAbsent(mq.getBrokerName() + "/" + mq.getQueueId(),
                        k -> new ArrayList<>()).add(m.getQueueOffset());
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                String broker = ctx.getMessageQueue().getBrokerName();
                for (MessageExt m : msgs) {
                    pushedFrom.computeIfAbsent(Harness.text(m.getBody()), k -> new ArrayList<>()).add(broker);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        Harness.startPush(push);
        boolean all = Harness.waitFor(() -> pushedFrom.keySet().containsAll(brokerByBody.keySet()), 40_000);
        push.shutdown();
        Map<String, List<String>> pushed = new TreeMap<>(pushedFrom);
        h.put("pushed", pushed);
        h.check("the push consumer received every message", all, pushed.keySet());
        List<String> wrongBroker = new ArrayList<>();
        for (Map.Entry<String, String> e : brokerByBody.entrySet()) {
            List<String> from = pushed.get(e.getKey());
            if (from != null && !from.stream().allMatch(e.getValue()::equals)) {
                wrongBroker.add(e.getKey() + ": sent to " + e.getValue() + ", pushed from " + from);
            }
        }
        h.check("each message was pushed from the broker its send went to", wrongBroker.isEmpty(), wrongBroker);
        Set<String> pushedBrokers = new TreeSet<>();
        for (List<String> from : pushed.values()) {
            pushedBrokers.addAll(from);
        }
        h.check("the push consumer received from both brokers", pushedBrokers.equals(expected), pushedBrokers);
        if (orderly) {
            Map<String, List<Long>> seen = new TreeMap<>(offsetsByQueue);
            boolean inOrder = !seen.isEmpty();
            for (List<Long> offsets : seen.values()) {
                for (int i = 1; i < offsets.size(); i++) {
                    inOrder &= offsets.get(i) > offsets.get(i - 1);
                }
            }
            h.check("the orderly consumer got each queue's messages in offset order", inOrder, seen);
        }
    }
}
