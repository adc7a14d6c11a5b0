package compat;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Pulls whose offset the broker corrects (past the max offset, or above 0 on an empty queue) answer
 * OFFSET_ILLEGAL, and the master records each as an OffsetMovedEvent in OFFSET_MOVED_EVENT (TAGS and
 * KEYS the group); pulls it does not correct (at the max offset, at 0 on an empty queue, found) record
 * nothing. The events are read back with a pull by the group's tag.
 */
public final class OffsetMoved {
    public static void main(String[] argv) {
        Harness.run(argv, OffsetMoved::scenario);
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        DefaultMQProducer producer = h.producer(group + "_p");
        List<MessageQueue> publish = new ArrayList<>(producer.fetchPublishMessageQueues(topic));
        publish.sort(Comparator.comparingInt(MessageQueue::getQueueId));
        for (int i = 0; i < 3; i++) {
            producer.send(new Message(topic, "T", Harness.utf8("m" + i)), publish.get(0));
        }
        producer.shutdown();

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group);
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        List<MessageQueue> queues = new ArrayList<>(pull.fetchSubscribeMessageQueues(topic));
        queues.sort(Comparator.comparingInt(MessageQueue::getQueueId));
        Collection<MessageQueue> eventQueues = pull.fetchSubscribeMessageQueues("OFFSET_MOVED_EVENT");
        MessageQueue events = eventQueues.iterator().next();
        long before = pull.maxOffset(events);

        Map<String, Object> pulls = new TreeMap<>();
        pulls.put("1 past the max offset", outcome(pull.pull(queues.get(0), "*", 100, 32)));
        pulls.put("2 at the max offset", outcome(pull.pull(queues.get(0), "*", 3, 32)));
        pulls.put("3 an empty queue at 5", outcome(pull.pull(queues.get(1), "*", 5, 32)));
        pulls.put("4 an empty queue at 0", outcome(pull.pull(queues.get(1), "*", 0, 32)));
        pulls.put("5 found", outcome(pull.pull(queues.get(0), "*", 1, 32)));
        h.put("pulls", pulls);
        h.check("corrected pulls are OFFSET_ILLEGAL with the corrected offset, the others not",
            "OFFSET_ILLEGAL next 3".equals(pulls.get("1 past the max offset"))
                && "NO_NEW_MSG next 3".equals(pulls.get("2 at the max offset"))
                && "OFFSET_ILLEGAL next 0".equals(pulls.get("3 an empty queue at 5"))
                && "NO_NEW_MSG next 0".equals(pulls.get("4 an empty queue at 0"))
                && "FOUND next 3".equals(pulls.get("5 found")), String.valueOf(pulls));

        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 10_000;
        long next = before;
        while (got.size() < 2 && System.currentTimeMillis() < deadline) {
            PullResult r = pull.pull(events, group, next, 32);
            if (r.getPullStatus() == PullStatus.FOUND) {
                got.addAll(r.getMsgFoundList());
            } else {
                Thread.sleep(100);
            }
            next = r.getNextBeginOffset();
        }
        Thread.sleep(500); // and nothing more comes
        PullResult more = pull.pull(events, group, next, 32);
        if (more.getPullStatus() == PullStatus.FOUND) {
            got.addAll(more.getMsgFoundList());
        }
        pull.shutdown();

        List<Object> seen = new ArrayList<>();
        List<String> wrong = new ArrayList<>();
        for (MessageExt m : got) {
            JSONObject body = JSON.parseObject(Harness.text(m.getBody()));
            JSONObject mq = body.getJSONObject("messageQueue");
            if (mq != null) {
                mq.put("brokerName", "<brokerName>"); // the brokers' names differ
            }
            Map<String, Object> d = new TreeMap<>();
            d.put("body", body);
            Map<String, String> props = new TreeMap<>(m.getProperties());
            props.remove(MessageConst.PROPERTY_MIN_OFFSET);
            props.remove(MessageConst.PROPERTY_MAX_OFFSET);
            d.put("properties", props);
            Map<String, Object> meta = new TreeMap<>(Stored.meta(m));
            meta.remove("queueOffset");
            meta.remove("bodyCRC"); // over the body, which names the broker
            d.put("stored", meta);
            d.put("bornHost=storeHost", String.valueOf(m.getBornHost()).equals(String.valueOf(m.getStoreHost())));
            d.put("bornHost=broker", String.valueOf(m.getBornHost()).endsWith(h.str("broker")));
            seen.add(d);
            if (!group.equals(m.getTags()) || !group.equals(m.getKeys()) || !"0".equals(m.getProperty("DELAY"))) {
                wrong.add("properties " + props);
            }
        }
        h.put("events", seen);
        List<String> requested = new ArrayList<>();
        for (MessageExt m : got) {
            JSONObject body = JSON.parseObject(Harness.text(m.getBody()));
            requested.add(body.getJSONObject("messageQueue").getInteger("queueId") + "@"
                + body.getLong("offsetRequest") + "->" + body.getLong("offsetNew"));
        }
        h.check("an OffsetMovedEvent per corrected pull (queue@requested->new), none for the others",
            requested.equals(List.of("0@100->3", "1@5->0")), String.valueOf(requested));
        h.check("each event is tagged and keyed by the group, DELAY 0", wrong.isEmpty(), String.valueOf(wrong));
    }

    static String outcome(PullResult r) {
        return r.getPullStatus() + " next " + r.getNextBeginOffset();
    }
}
