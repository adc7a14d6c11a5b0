package compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Looking messages up: queryMessage(topic, key, maxNum, begin, end) finds every message carrying a
 * key (one of several keys, or a key two messages share), and none for a key never sent;
 * viewMessage(topic, offsetMsgId) reads one message by its stored id and viewMessage(topic, msgId)
 * by its unique key. The broker's index may lag its store, so each lookup retries for a while.
 */
public final class Query {
    public static void main(String[] argv) {
        Harness.run(argv, Query::scenario);
    }

    interface Lookup<T> {
        T get() throws Exception;
    }

    /** The first answer within ``timeoutMs`` that ``ok`` accepts, or the last answer / exception. */
    static <T> Object retry(Lookup<T> lookup, java.util.function.Predicate<T> ok, long timeoutMs)
        throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Object last = null;
        while (true) {
            try {
                T value = lookup.get();
                last = value;
                if (ok.test(value)) {
                    return value;
                }
            } catch (Exception e) {
                last = e;
            }
            if (System.currentTimeMillis() >= deadline) {
                return last;
            }
            Thread.sleep(200);
        }
    }

    static List<String> bodies(Object result) {
        List<String> out = new ArrayList<>();
        if (result instanceof QueryResult) {
            for (MessageExt m : ((QueryResult) result).getMessageList()) {
                out.add(Harness.text(m.getBody()));
            }
            java.util.Collections.sort(out);
        }
        return out;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String tag = h.str("group");
        DefaultMQProducer producer = new DefaultMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.setSendMsgTimeout(10_000); // a loaded machine answers slowly
        producer.start();

        long begin = System.currentTimeMillis() - 1000;
        String[][] keysOf = {
            {"q-solo-" + tag},
            {"q-shared-" + tag, "q-first-" + tag},
            {"q-shared-" + tag, "q-second-" + tag},
        };
        List<SendResult> sent = new ArrayList<>();
        boolean sendsOk = true;
        for (int i = 0; i < keysOf.length; i++) {
            Message m = new Message(topic, "TagQ", String.join(" ", keysOf[i]), Harness.utf8("query-body-" + i));
            m.putUserProperty("index", Integer.toString(i));
            SendResult r = producer.send(m);
            sendsOk &= r.getSendStatus() == SendStatus.SEND_OK;
            sent.add(r);
        }
        h.check("sends answered SEND_OK", sendsOk, null);
        long end = System.currentTimeMillis() + 60_000;

        Object solo = retry(() -> producer.queryMessage(topic, "q-solo-" + tag, 32, begin, end),
            r -> r.getMessageList().size() >= 1, 10_000);
        List<String> soloBodies = bodies(solo);
        h.check("queryMessage by a message's only key finds it", soloBodies.equals(List.of("query-body-0")),
            solo instanceof Exception ? solo.toString() : soloBodies);
        if (solo instanceof QueryResult && !((QueryResult) solo).getMessageList().isEmpty()) {
            MessageExt m = ((QueryResult) solo).getMessageList().get(0);
            h.check("the message found by key has its topic, keys, tags, properties and msgId",
                topic.equals(m.getTopic()) && ("q-solo-" + tag).equals(m.getKeys()) && "TagQ".equals(m.getTags())
                    && "0".equals(m.getUserProperty("index")) && sent.get(0).getMsgId().equals(m.getMsgId()),
                Harness.describe(m));
        } else {
            h.check("the message found by key has its topic, keys, tags, properties and msgId", false, null);
        }

        Object shared = retry(() -> producer.queryMessage(topic, "q-shared-" + tag, 32, begin, end),
            r -> r.getMessageList().size() >= 2, 10_000);
        h.check("queryMessage by a key two messages share finds both",
            bodies(shared).equals(List.of("query-body-1", "query-body-2")),
            shared instanceof Exception ? shared.toString() : bodies(shared));
        Object second = retry(() -> producer.queryMessage(topic, "q-second-" + tag, 32, begin, end),
            r -> r.getMessageList().size() >= 1, 10_000);
        h.check("queryMessage by the second of two keys finds its message",
            bodies(second).equals(List.of("query-body-2")),
            second instanceof Exception ? second.toString() : bodies(second));

        Object limited = retry(() -> producer.queryMessage(topic, "q-shared-" + tag, 1, begin, end),
            r -> r.getMessageList().size() >= 1, 5_000);
        h.put("maxNum1", limited instanceof Exception ? limited.toString() : bodies(limited));
        h.check("queryMessage with maxNum 1 finds messages of the key only",
            limited instanceof QueryResult && !bodies(limited).isEmpty()
                && List.of("query-body-1", "query-body-2").containsAll(bodies(limited)),
            limited instanceof Exception ? limited.toString() : bodies(limited));

        Object before = retry(() -> producer.queryMessage(topic, "q-solo-" + tag, 32, begin - 60_000, begin),
            r -> false, 0);
        h.check("queryMessage over a time range before the send finds nothing",
            before instanceof MQClientException || bodies(before).isEmpty(),
            before instanceof Exception ? before.toString() : bodies(before));
        Object none = retry(() -> producer.queryMessage(topic, "q-never-" + tag, 32, begin, end), r -> false, 0);
        h.put("absentKey", none instanceof Exception ? none.toString() : bodies(none));
        h.check("queryMessage by a key never sent finds nothing",
            none instanceof MQClientException || bodies(none).isEmpty(),
            none instanceof Exception ? none.toString() : bodies(none));

        List<String> byOffset = new ArrayList<>();
        List<String> byUniq = new ArrayList<>();
        Map<String, Object> viewed = new TreeMap<>();
        Map<String, Object> viewedMeta = new TreeMap<>();
        for (int i = 0; i < sent.size(); i++) {
            SendResult r = sent.get(i);
            String body = "query-body-" + i;
            Object v = retry(() -> producer.viewMessage(topic, r.getOffsetMsgId()), m -> m != null, 5_000);
            if (!(v instanceof MessageExt) || !body.equals(Harness.text(((MessageExt) v).getBody()))
                || !r.getMsgId().equals(((MessageExt) v).getMsgId())
                || !String.join(" ", keysOf[i]).equals(((MessageExt) v).getKeys())) {
                byOffset.add(body + ": " + (v instanceof MessageExt ? Harness.describe((MessageExt) v) : v));
            } else {
                viewed.put(body, new TreeSet<>(((MessageExt) v).getProperties().keySet()));
                viewedMeta.put(body, Stored.meta((MessageExt) v));
            }
            Object u = retry(() -> producer.viewMessage(topic, r.getMsgId()), m -> m != null, 10_000);
            if (!(u instanceof MessageExt) || !body.equals(Harness.text(((MessageExt) u).getBody()))
                || !r.getMsgId().equals(((MessageExt) u).getMsgId())
                || !Integer.toString(i).equals(((MessageExt) u).getUserProperty("index"))) {
                byUniq.add(body + ": " + (u instanceof MessageExt ? Harness.describe((MessageExt) u) : u));
            }
        }
        h.put("viewedPropertyKeys", viewed);
        h.put("viewedStored", viewedMeta);
        h.check("viewMessage by offsetMsgId returns the message stored there", byOffset.isEmpty(), byOffset);
        h.check("viewMessage by unique key (msgId) returns that message", byUniq.isEmpty(), byUniq);
        producer.shutdown();
    }
}
