package compat;

import com.alibaba.fastjson.JSONObject;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Transactions with ACL on, the producer signing with AclClientRPCHook: with a key that has PUB on the
 * topic the committed half message is delivered to a signed consumer, the rolled-back one never is, and
 * the one left UNKNOW is settled by the broker's check-back (checkLocalTransaction answers COMMIT, its
 * signed END_TRANSACTION lets it through). A key without PUB on the topic is refused the half message;
 * the refusal's code and remark go to {@code data}.
 */
public final class AclTransaction {
    public static void main(String[] argv) {
        Harness.run(argv, AclTransaction::scenario);
    }

    /** A started transactional producer signing as {@code ak}; its own client instance. */
    private static TransactionMQProducer producer(Harness h, String id, String ak, String sk,
        TransactionListener listener) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer("acl_tx_pg_" + id, Acl.hook(ak, sk));
        p.setNamesrvAddr(h.namesrv());
        p.setInstanceName("acl-tx-" + id);
        p.setRetryTimesWhenSendFailed(0);
        p.setSendMsgTimeout(10_000);
        p.setTransactionListener(listener);
        p.start();
        return p;
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String userAk = h.str("userAk");
        String userSk = h.str("userSk");

        DefaultMQProducer admin = Acl.producer(h, "tx-admin", h.str("adminAk"), h.str("adminSk"));
        Acl.createTopic(h, admin, topic);
        admin.shutdown();
        h.check("the admin account creates the topic", true, null);

        Map<String, Integer> checkedBack = new ConcurrentHashMap<>(); // body -> check-backs seen
        AtomicInteger executed = new AtomicInteger();
        TransactionListener listener = new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                executed.incrementAndGet();
                return Transaction.decided(arg);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checkedBack.merge(Harness.text(msg.getBody()), 1, Integer::sum);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        };
        String id = topic.replaceAll("[^A-Za-z0-9]", "_");
        TransactionMQProducer user = producer(h, id, userAk, userSk, listener);
        Map<String, String> states = new TreeMap<>();
        boolean sentOk = true;
        for (String decision : Transaction.DECISIONS) {
            Message m = new Message(topic, "Tag" + decision, Harness.utf8("acl-tx-" + decision));
            TransactionSendResult r = user.sendMessageInTransaction(m, decision);
            sentOk &= r.getSendStatus() == SendStatus.SEND_OK;
            states.put(decision, String.valueOf(r.getLocalTransactionState()));
        }
        h.check("the right key sends every half message", sentOk && executed.get() == 3, states);

        boolean checked = Harness.waitFor(() -> checkedBack.containsKey("acl-tx-unknown"), 20_000);
        h.check("the broker checked back the UNKNOW transaction of the signed producer", checked,
            checkedBack.keySet());

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group"), Acl.hook(userAk, userSk));
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("acl-tx-pull-" + id);
        pull.start();
        Harness.drain(pull, topic, 2, 20_000);
        // a rolled-back message would be there by now (the committed ones are); look once more
        Thread.sleep(1500);
        List<MessageExt> got = Harness.drain(pull, topic, 3, 500);
        pull.shutdown();
        Map<String, Integer> copies = new TreeMap<>();
        for (MessageExt m : got) {
            copies.merge(Harness.text(m.getBody()), 1, Integer::sum);
        }
        int checkBacks = checkedBack.getOrDefault("acl-tx-unknown", 0);
        int unknownCopies = copies.getOrDefault("acl-tx-unknown", 0);
        h.check("the committed message reaches the signed consumer once, the rolled-back one never",
            copies.getOrDefault("acl-tx-commit", 0) == 1 && !copies.containsKey("acl-tx-rollback"), copies);
        // one copy per check-back the broker sent before the COMMIT answer came (as without ACL)
        h.check("the checked-back message is delivered after its COMMIT answer",
            unknownCopies >= 1 && unknownCopies <= checkBacks, "delivered " + copies + ", check-backs " + checkBacks);
        h.check("no check-back for a committed or rolled-back transaction",
            !checkedBack.containsKey("acl-tx-commit") && !checkedBack.containsKey("acl-tx-rollback"),
            checkedBack.keySet());
        user.shutdown();

        TransactionMQProducer subOnly = producer(h, id + "_subonly", h.str("subOnlyAk"), h.str("subOnlySk"), listener);
        JSONObject seen;
        try {
            TransactionSendResult r = subOnly.sendMessageInTransaction(
                new Message(topic, Harness.utf8("acl-tx-subonly")), "commit");
            seen = new JSONObject(true);
            seen.put("sent", r.getSendStatus().toString());
        } catch (Exception e) {
            seen = Acl.refusal(e);
        }
        subOnly.shutdown();
        h.put("half message without PUB on the topic", seen);
        h.check("a key without PUB on the topic is refused the half message with SYSTEM_ERROR",
            Integer.valueOf(1).equals(seen.get("code")), seen.toJSONString());
    }
}
