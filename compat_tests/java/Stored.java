package compat;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * What a broker stored with a message besides its body: the record's fields a client decodes
 * (sysFlag, flag, reconsumeTimes, queue, whether it names a prepared transaction) and its
 * properties, for the wrapper to compare rmqgate's with the Java broker's field by field.
 */
final class Stored {
    private Stored() {
    }

    static Map<String, Object> meta(MessageExt m) {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("topic", m.getTopic());
        d.put("queueId", m.getQueueId());
        d.put("queueOffset", m.getQueueOffset());
        d.put("sysFlag", m.getSysFlag());
        d.put("flag", m.getFlag());
        d.put("reconsumeTimes", m.getReconsumeTimes());
        d.put("bodyCRC", m.getBodyCRC());
        d.put("preparedTransactionOffset>0", m.getPreparedTransactionOffset() > 0);
        d.put("bornTimestamp<=storeTimestamp", m.getBornTimestamp() <= m.getStoreTimestamp());
        return d;
    }

    static Map<String, String> properties(MessageExt m) {
        return new TreeMap<>(m.getProperties());
    }
}
