// MirrorMaker 2's own translation of a consumer group's offsets (RemoteClusterUtils.translateOffsets, from
// connect-mirror-client), as a Java consumer failing over to the target cluster calls it: reads the
// checkpoints topic of the source cluster's alias on the target. Run by the tests with Java's single-file
// launcher: java -cp 'var/jars/mirror-client/*' TranslateOffsets.java <target bootstrap> <source alias> <group>
// [<replication.policy.separator>]. Prints one line per partition: topic, partition, offset (tab-separated).
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<String, Object> target = new HashMap<>(Map.of("bootstrap.servers", args[0]));
        if (args.length > 3) {
            target.put("replication.policy.separator", args[3]);
        }
        Map<TopicPartition, OffsetAndMetadata> translated =
            RemoteClusterUtils.translateOffsets(target, args[1], args[2], Duration.ofSeconds(60));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : translated.entrySet()) {
            System.out.println(
                entry.getKey().topic() + "\t" + entry.getKey().partition() + "\t" + entry.getValue().offset());
        }
    }
}
