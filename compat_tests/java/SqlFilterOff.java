package compat;

import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * SQL92 subscriptions on a broker with enablePropertyFilter=false (the default): a push consumer
 * fails to start (CHECK_CLIENT_CONFIG answers SYSTEM_ERROR) and a pull carrying a SQL92 expression
 * is answered SYSTEM_ERROR; the codes and remarks are recorded.
 */
public final class SqlFilterOff {
    public static void main(String[] argv) {
        Harness.run(argv, SqlFilterOff::scenario);
    }

    static void scenario(Harness h) throws Exception {
        String topic = h.str("topic");
        DefaultMQProducer producer = h.producer(h.str("producerGroup"));
        Message m = new Message(topic, "TagA", Harness.utf8("m0"));
        m.putUserProperty("a", "1");
        producer.send(m);
        producer.shutdown();

        DefaultMQPushConsumer push = h.pushConsumer(h.str("group"), "push");
        push.subscribe(topic, MessageSelector.bySql("a = 1"));
        push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        int pushCode = 0;
        String pushRemark = "";
        try {
            push.start();
        } catch (MQClientException e) {
            pushCode = e.getResponseCode();
            pushRemark = String.valueOf(e.getErrorMessage());
        } finally {
            push.shutdown();
        }
        h.check("a push consumer subscribing SQL92 fails to start with SYSTEM_ERROR", pushCode == 1,
            "code " + pushCode + " " + pushRemark);
        h.put("push", pushCode + " " + pushRemark);

        DefaultMQPullConsumer pull = new DefaultMQPullConsumer(h.str("group2"));
        pull.setNamesrvAddr(h.namesrv());
        pull.setInstanceName("pull");
        pull.start();
        List<MessageQueue> queues = new ArrayList<>(pull.fetchSubscribeMessageQueues(topic));
        MQClientInstance client = MQClientManager.getInstance().getOrCreateMQClientInstance(pull);
        client.updateTopicRouteInfoFromNameServer(topic);
        client.sendHeartbeatToAllBrokerWithLock();
        int pullCode = 0;
        String pullRemark = "";
        try {
            pull.pull(queues.get(0), MessageSelector.bySql("a = 1"), 0, 32);
        } catch (MQBrokerException e) {
            pullCode = e.getResponseCode();
            pullRemark = String.valueOf(e.getErrorMessage());
        }
        pull.shutdown();
        h.check("a pull carrying a SQL92 expression is answered SYSTEM_ERROR", pullCode == 1,
            "code " + pullCode + " " + pullRemark);
        h.put("pull", pullCode + " " + pullRemark);
    }
}
