package compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Sync, async, oneway and batch sends to one topic, then every message read back with PULL_MESSAGE:
 * each arrives once with its body, tags, keys and user properties, under the id its send returned.
 */
public final class SendModes {
    public static void main(String[] argv) {
        Harness.run(argv, SendModes::scenario);
    }

    private static Message message(String topic, String mode, int i) {
        Message m = new Message(topic, "Tag" + mode, mode + "-key-" + i, Harness.utf8(mode + "-body-" + i));
        m.putUserProperty("mode", mode);
        m.putUserProperty("index", Integer.toString(i));
        return m;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        int n = h.num("count", 4);
        DefaultMQProducer producer = new DefaultMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.start();
        Map<String, String> idByBody = new TreeMap<>(); // body -> msgId the send returned
        Map<String, String> offsetIdByBody = new TreeMap<>();

        boolean syncOk = true;
        for (int i = 0; i < n; i++) {
            Message m = message(topic, "sync", i);
            SendResult r = producer.send(m);
            syncOk &= r.getSendStatus() == SendStatus.SEND_OK;
            idByBody.put("sync-body-" + i, r.getMsgId());
            offsetIdByBody.put("sync-body-" + i, r.getOffsetMsgId());
        }
        h.check("sync sends answered SEND_OK", syncOk, null);

        CountDownLatch done = new CountDownLatch(n);
        Map<String, String> asyncIds = new ConcurrentHashMap<>();
        Map<String, String> asyncOffsetIds = new ConcurrentHashMap<>();
        List<String> asyncErrors = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final String body = "async-body-" + i;
            producer.send(message(topic, "async", i), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        asyncIds.put(body, r.getMsgId());
                        asyncOffsetIds.put(body, r.getOffsetMsgId());
                    }
                    done.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    synchronized (asyncErrors) {
                        asyncErrors.add(e.toString());
                    }
                    done.countDown();
                }
            });
        }
        boolean asyncDone = done.await(30, TimeUnit.SECONDS);
        h.check("async sends called back SEND_OK", asyncDone && asyncIds.size() == n, asyncErrors);
        idByBody.putAll(asyncIds);
        offsetIdByBody.putAll(asyncOffsetIds);

        for (int i = 0; i < n; i++) {
            producer.sendOneway(message(topic, "oneway", i));
        }

        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            batch.add(message(topic, "batch", i));
        }
        SendResult br = producer.send(batch);
        h.check("batch send answered SEND_OK", br.getSendStatus() == SendStatus.SEND_OK, br.getSendStatus());
        String[] batchIds = br.getMsgId() == null ? new String[0] : br.getMsgId().split(",");
        String[] batchOffsetIds = br.getOffsetMsgId() == null ? new String[0] : br.getOffsetMsgId().split(",");
        h.put("batchMsgId", br.getMsgId());
        h.put("batchOffsetMsgId", br.getOffsetMsgId());
        Set<String> distinct = new HashSet<>(Arrays.asList(batchIds));
        h.check("batch send returned one distinct msgId per message", distinct.size() == n, br.getMsgId());
        h.check("batch send returned one offsetMsgId per message", batchOffsetIds.length == n, br.getOffsetMsgId());
        if (batchIds.length == n) {
            for (int i = 0; i < n; i++) {
                idByBody.put("batch-body-" + i, batchIds[i]);
            }
        }
        if (batchOffsetIds.length == n) {
            for (int i = 0; i < n; i++) {
                offsetIdByBody.put("batch-body-" + i, batchOffsetIds[i]);
            }
        }
        producer.shutdown();

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group") + "_reader");
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        List<MessageExt> got = Harness.drain(pull, topic, 4 * n, 30_000);
        pull.shutdown();

        Map<String, MessageExt> byBody = new HashMap<>();
        List<String> duplicates = new ArrayList<>();
        for (MessageExt m : got) {
            if (byBody.put(Harness.text(m.getBody()), m) != null) {
                duplicates.add(Harness.text(m.getBody()));
            }
        }
        h.check("every message stored once", got.size() == 4 * n && duplicates.isEmpty(),
            "stored " + got.size() + ", duplicates " + duplicates);

        List<String> wrong = new ArrayList<>();
        for (String mode : new String[] {"sync", "async", "oneway", "batch"}) {
            for (int i = 0; i < n; i++) {
                String body = mode + "-body-" + i;
                MessageExt m = byBody.get(body);
                if (m == null) {
                    wrong.add(body + ": missing");
                    continue;
                }
                if (!("Tag" + mode).equals(m.getTags()) || !(mode + "-key-" + i).equals(m.getKeys())) {
                    wrong.add(body + ": tags/keys " + m.getTags() + "/" + m.getKeys());
                }
                Map<String, String> user = Harness.userProperties(m);
                if (!mode.equals(user.get("mode")) || !Integer.toString(i).equals(user.get("index"))) {
                    wrong.add(body + ": user properties " + user);
                }
            }
        }
        h.check("bodies, tags, keys and user properties as sent", wrong.isEmpty(), wrong);

        List<String> badIds = new ArrayList<>();
        for (Map.Entry<String, String> e : idByBody.entrySet()) {
            MessageExt m = byBody.get(e.getKey());
            if (m != null && !e.getValue().equals(m.getMsgId())) {
                badIds.add(e.getKey() + ": sent " + e.getValue() + ", consumed " + m.getMsgId());
            }
        }
        h.check("a consumed message's msgId is the one its send returned", badIds.isEmpty(), badIds);

        List<String> badOffsetIds = new ArrayList<>();
        for (Map.Entry<String, String> e : offsetIdByBody.entrySet()) {
            MessageExt m = byBody.get(e.getKey());
            if (m instanceof MessageClientExt) {
                String stored = ((MessageClientExt) m).getOffsetMsgId();
                if (!e.getValue().equals(stored)) {
                    badOffsetIds.add(e.getKey() + ": sent " + e.getValue() + ", consumed " + stored);
                }
            }
        }
        h.check("a consumed message's offsetMsgId is the one its send returned", badOffsetIds.isEmpty(),
            badOffsetIds);
    }
}
