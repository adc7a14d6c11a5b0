package compat;

import com.alibaba.fastjson.JSONObject;
import java.util.List;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Plain ACL (aclEnable=true) seen by clients signing with AclClientRPCHook: the admin account creates
 * the topic, the right key sends and consumes; a wrong secret, an unknown key, an unsigned client, a
 * key without PUB on the topic, a non-admin creating a topic and a key outside its white address are
 * refused. Each refusal's response code and remark go to {@code data} (the wrapper compares them).
 */
public final class Acl {
    public static void main(String[] argv) {
        Harness.run(argv, Acl::scenario);
    }

    static RPCHook hook(String ak, String sk) {
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    /** A started producer signing as {@code ak} (none: unsigned); its own client instance (hooks are per instance). */
    static DefaultMQProducer producer(Harness h, String name, String ak, String sk) throws Exception {
        String id = name.replaceAll("[^A-Za-z0-9]", "_");
        DefaultMQProducer p = ak == null ? new DefaultMQProducer("acl_pg_" + id)
            : new DefaultMQProducer("acl_pg_" + id, hook(ak, sk));
        p.setNamesrvAddr(h.namesrv());
        p.setInstanceName("acl-" + id);
        p.setRetryTimesWhenSendFailed(0);
        p.setSendMsgTimeout(10_000);
        p.start();
        return p;
    }

    /** The response code and remark of the broker's refusal in {@code e}'s causes. */
    static JSONObject refusal(Throwable e) {
        JSONObject out = new JSONObject(true);
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof MQBrokerException) {
                out.put("code", ((MQBrokerException) t).getResponseCode());
                out.put("remark", ((MQBrokerException) t).getErrorMessage());
                return out;
            }
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof MQClientException && ((MQClientException) t).getResponseCode() > 0) {
                out.put("code", ((MQClientException) t).getResponseCode());
                out.put("remark", ((MQClientException) t).getErrorMessage());
                return out;
            }
        }
        out.put("exception", e.getClass().getName());
        return out;
    }

    /** UPDATE_AND_CREATE_TOPIC to the program's broker, signed as the producer signs. */
    static void createTopic(Harness h, DefaultMQProducer p, String topic) throws Exception {
        p.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl()
            .createTopic(h.str("broker"), "TBW102", new TopicConfig(topic, 4, 4, 6), 10_000);
    }

    private static void refusedSend(Harness h, String what, String ak, String sk, String topic) throws Exception {
        DefaultMQProducer p = producer(h, what, ak, sk);
        JSONObject seen;
        try {
            SendResult r = p.send(new Message(topic, Harness.utf8(what)));
            seen = new JSONObject(true);
            seen.put("sent", r.getSendStatus().toString());
        } catch (Exception e) {
            seen = refusal(e);
        }
        p.shutdown();
        h.put(what, seen);
        h.check(what + ": send refused with SYSTEM_ERROR", Integer.valueOf(1).equals(seen.get("code")), seen.toJSONString());
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        String group = h.str("group");
        String userAk = h.str("userAk");
        String userSk = h.str("userSk");

        DefaultMQProducer admin = producer(h, "admin", h.str("adminAk"), h.str("adminSk"));
        createTopic(h, admin, topic);
        h.check("the admin account creates the topic", true, null);
        admin.shutdown();

        DefaultMQProducer nonAdmin = producer(h, "nonadmin", userAk, userSk);
        JSONObject created;
        try {
            createTopic(h, nonAdmin, topic + "_X");
            created = new JSONObject(true);
            created.put("created", true);
        } catch (Exception e) {
            created = refusal(e);
        }
        nonAdmin.shutdown();
        h.put("non-admin creates a topic", created);
        h.check("a non-admin account cannot create a topic", Integer.valueOf(1).equals(created.get("code")),
            created.toJSONString());

        DefaultMQProducer user = producer(h, "user", userAk, userSk);
        int n = 3;
        boolean sent = true;
        for (int i = 0; i < n; i++) {
            sent &= user.send(new Message(topic, "TagA", Harness.utf8("acl-body-" + i))).getSendStatus().toString()
                .equals("SEND_OK");
        }
        user.shutdown();
        h.check("the right key sends", sent, null);

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(group, hook(userAk, userSk));
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("acl-pull");
        pull.start();
        List<MessageExt> got = Harness.drain(pull, topic, n, 20_000);
        pull.shutdown();
        h.check("the right key consumes every message", got.size() == n, got.size());

        refusedSend(h, "wrong secret", userAk, userSk + "x", topic);
        refusedSend(h, "unknown key", "aclNobody01", userSk, topic);
        refusedSend(h, "unsigned", null, null, topic);
        refusedSend(h, "no PUB on the topic", h.str("subOnlyAk"), h.str("subOnlySk"), topic);
        refusedSend(h, "outside the white address", h.str("farAk"), h.str("farSk"), topic);

        // a pull needs SUB on the topic and on the group: with neither, Java names the first of the
        // two in its HashMap's order
        DefaultMQPullConsumer farPull = new DefaultMQPullConsumer("acl_far_cg", hook(h.str("farAk"), h.str("farSk")));
        farPull.setNamesrvAddr(h.namesrv());
        farPull.setInstanceName("acl-far-pull");
        farPull.start();
        JSONObject pulled = new JSONObject(true);
        try {
            MessageQueue mq = farPull.fetchSubscribeMessageQueues(topic).iterator().next();
            pulled.put("pulled", farPull.pull(mq, "*", 0, 32).getPullStatus().toString());
        } catch (Exception e) {
            pulled = refusal(e);
        }
        farPull.shutdown();
        h.put("pull without SUB on topic and group", pulled);
        h.check("pull without SUB on topic and group: refused with SYSTEM_ERROR",
            Integer.valueOf(1).equals(pulled.get("code")), pulled.toJSONString());

        // 4.9.8: an account's white address lets its requests through without a signature check
        DefaultMQProducer near = producer(h, "near", h.str("nearAk"), "not-the-secret");
        JSONObject nearSeen = new JSONObject(true);
        try {
            nearSeen.put("sent", near.send(new Message(topic, Harness.utf8("near"))).getSendStatus().toString());
        } catch (Exception e) {
            nearSeen = refusal(e);
        }
        near.shutdown();
        h.put("inside the white address, wrong secret", nearSeen);
        h.check("inside its white address an account's wrong secret is not checked",
            "SEND_OK".equals(nearSeen.get("sent")), nearSeen.toJSONString());
    }
}
