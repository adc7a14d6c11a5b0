package compat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Transactional sends through TransactionMQProducer: the half message the local transaction commits
 * is delivered, the one it rolls back never is, and the one left UNKNOW is settled by the broker's
 * check-back (checkLocalTransaction answers COMMIT) and then delivered (a copy per check-back the
 * broker sent before the answer came). Every delivered message has its body, keys, tags and user
 * properties, under the msgId its send returned.
 */
public final class Transaction {
    public static void main(String[] argv) {
        Harness.run(argv, Transaction::scenario);
    }

    static final String[] DECISIONS = {"commit", "rollback", "unknown"};
    static final String HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC";

    /** What executeLocalTransaction answers for the decision a send was given as its argument. */
    static LocalTransactionState decided(Object decision) {
        switch ((String) decision) {
            case "commit":
                return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE;
            default:
                return LocalTransactionState.UNKNOW;
        }
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        Map<String, List<Map<String, Object>>> checkedByBody = new ConcurrentHashMap<>();
        Map<String, String> executedBody = new ConcurrentHashMap<>(); // body -> transactionId seen locally

        TransactionMQProducer producer = new TransactionMQProducer(h.str("group"));
        producer.setNamesrvAddr(h.namesrv());
        producer.setSendMsgTimeout(10_000); // a loaded machine answers slowly
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String body = Harness.text(msg.getBody());
                executedBody.put(body, String.valueOf(msg.getTransactionId()));
                return decided(arg);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                Map<String, Object> seen = new TreeMap<>();
                seen.put("topic", msg.getTopic());
                seen.put("keys", msg.getKeys());
                seen.put("tags", msg.getTags());
                seen.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                seen.put("transactionId", msg.getTransactionId());
                seen.put("user", Harness.userProperties(msg));
                seen.put("producerGroup", msg.getProperty(MessageConst.PROPERTY_PRODUCER_GROUP));
                seen.put("stored", Stored.meta(msg));
                seen.put("properties", Stored.properties(msg));
                checkedByBody.computeIfAbsent(Harness.text(msg.getBody()), k -> new CopyOnWriteArrayList<>()).add(seen);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();

        Map<String, TransactionSendResult> sent = new HashMap<>();
        List<String> badSends = new ArrayList<>();
        for (String decision : DECISIONS) {
            Message m = new Message(topic, "Tag" + decision, "tx-key-" + decision, Harness.utf8("tx-body-" + decision));
            m.putUserProperty("decision", decision);
            TransactionSendResult r = producer.sendMessageInTransaction(m, decision);
            sent.put(decision, r);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                badSends.add(decision + ": " + r.getSendStatus());
            }
        }
        h.check("every half message answered SEND_OK", badSends.isEmpty(), badSends);
        Map<String, Object> states = new TreeMap<>();
        for (String decision : DECISIONS) {
            states.put(decision, String.valueOf(sent.get(decision).getLocalTransactionState()));
        }
        h.check("the local transaction ran once per half message, with its decision",
            executedBody.size() == 3
                && "COMMIT_MESSAGE".equals(states.get("commit"))
                && "ROLLBACK_MESSAGE".equals(states.get("rollback"))
                && "UNKNOW".equals(states.get("unknown")),
            states);

        boolean checked = Harness.waitFor(() -> checkedByBody.containsKey("tx-body-unknown"), 15_000);
        h.check("the broker checked back the UNKNOW transaction", checked, checkedByBody.keySet());
        List<Map<String, Object>> checks = checkedByBody.getOrDefault("tx-body-unknown", new ArrayList<>());
        if (!checks.isEmpty()) {
            Map<String, Object> first = checks.get(0);
            Map<String, String> user = new TreeMap<>();
            user.put("decision", "unknown");
            user.put(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES, "1"); // the broker counts its checks
            boolean asSent = topic.equals(first.get("topic"))
                && "tx-key-unknown".equals(first.get("keys"))
                && "Tagunknown".equals(first.get("tags"))
                && sent.get("unknown").getMsgId().equals(first.get("uniqKey"))
                && sent.get("unknown").getMsgId().equals(first.get("transactionId"))
                && h.str("group").equals(first.get("producerGroup"))
                && user.equals(first.get("user"));
            h.check("the first check-back carried the half message as sent, TRANSACTION_CHECK_TIMES 1",
                asSent, first);
        } else {
            h.check("the first check-back carried the half message as sent, TRANSACTION_CHECK_TIMES 1",
                false, "no check-back");
        }

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group") + "_reader");
        pull.setNamesrvAddr(h.namesrv());
        pull.start();
        List<MessageExt> got = Harness.drain(pull, topic, 2, 15_000);
        // a rolled-back message would be there by now (the committed ones are); look once more
        Thread.sleep(1500);
        got = Harness.drain(pull, topic, 3, 500);
        pull.shutdown();
        h.check("the check-back of a committed or rolled-back transaction never came",
            !checkedByBody.containsKey("tx-body-commit") && !checkedByBody.containsKey("tx-body-rollback"),
            checkedByBody.keySet());

        Map<String, MessageExt> byBody = new HashMap<>(); // the first copy of each, by queue offset
        Map<String, Integer> copies = new TreeMap<>();
        List<Object> seen = new ArrayList<>();
        for (MessageExt m : got) {
            String body = Harness.text(m.getBody());
            byBody.putIfAbsent(body, m);
            copies.merge(body, 1, Integer::sum);
            seen.add(Harness.describe(m));
        }
        h.put("delivered", seen);
        int checkBacks = checkedByBody.getOrDefault("tx-body-unknown", new ArrayList<>()).size();
        h.put("checkBacksOfUnknown", checkBacks);
        // each check-back re-stores the half message, and each COMMIT answer delivers the copy it was
        // asked about: a broker that checks again before the answer arrives (4.9.8 does, when the
        // producer answers after transactionCheckInterval) delivers one copy per committed check
        int unknownCopies = copies.getOrDefault("tx-body-unknown", 0);
        h.check("the committed message is delivered once, the rolled-back one never",
            copies.getOrDefault("tx-body-commit", 0) == 1 && !copies.containsKey("tx-body-rollback"), copies);
        h.check("the checked-back message is delivered, once per check-back that committed it",
            unknownCopies >= 1 && unknownCopies <= checkBacks, "delivered " + copies + ", check-backs " + checkBacks);

        List<String> wrong = new ArrayList<>();
        Map<String, Object> props = new TreeMap<>();
        Map<String, Object> meta = new TreeMap<>();
        List<String> notHalf = new ArrayList<>();
        for (String decision : new String[] {"commit", "unknown"}) {
            MessageExt m = byBody.get("tx-body-" + decision);
            if (m == null) {
                continue;
            }
            if (!("Tag" + decision).equals(m.getTags()) || !("tx-key-" + decision).equals(m.getKeys())
                || !decision.equals(m.getUserProperty("decision"))) {
                wrong.add(decision + ": " + Harness.describe(m));
            }
            if (m.getQueueId() != sent.get(decision).getMessageQueue().getQueueId() || !topic.equals(m.getTopic())) {
                wrong.add(decision + ": in " + m.getTopic() + "/" + m.getQueueId() + ", half sent to "
                    + sent.get(decision).getMessageQueue());
            }
            if (!sent.get(decision).getMsgId().equals(m.getMsgId())) {
                wrong.add(decision + ": msgId sent " + sent.get(decision).getMsgId() + ", consumed " + m.getMsgId());
            }
            props.put(decision, Stored.properties(m));
            // preparedTransactionOffset is the CommitLog offset of the half message the commit
            // settled (0 for a half that was the log's first message): viewed there, it is that half
            Map<String, Object> fields = Stored.meta(m);
            fields.remove("preparedTransactionOffset>0");
            MessageExt half = producer.viewMessage(HALF_TOPIC,
                MessageDecoder.createMessageId(m.getStoreHost(), m.getPreparedTransactionOffset()));
            boolean namesHalf = HALF_TOPIC.equals(half.getTopic())
                && m.getMsgId().equals(half.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            fields.put("preparedTransactionOffset names its half message", namesHalf);
            if (!namesHalf) {
                notHalf.add(decision + ": at preparedTransactionOffset " + m.getPreparedTransactionOffset() + ": "
                    + Harness.describe(half));
            }
            meta.put(decision, fields);
        }
        h.put("properties", props);
        h.put("stored", meta);
        if (!checks.isEmpty()) {
            h.put("checkBackStored", checks.get(0).get("stored"));
            h.put("checkBackProperties", checks.get(0).get("properties"));
        }
        h.check("delivered to the queue the half was sent to, with its tags, keys, properties and msgId",
            wrong.isEmpty(), wrong);
        h.check("each delivered message's preparedTransactionOffset is its half message's CommitLog offset",
            notHalf.isEmpty() && meta.size() == 2, notHalf);
        producer.shutdown();
    }
}
