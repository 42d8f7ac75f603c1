// MirrorMaker 2's own names (its replication policies, from connect-mirror-client) of the topics a mirror
// writes on its target, for the tests to compare with the mirror's. Run with Java's single-file launcher:
// java -cp 'var/jars/mirror-client/*' PolicyNames.java <policy> <separator> <internal separator enabled> <alias> ...
// (groups of four; <policy> a class of org.apache.kafka.connect.mirror). Prints one line per group: the offset
// syncs topic, the checkpoints topic, the replica of "orders" and that of "heartbeats" (tab-separated).
import java.util.Map;
import org.apache.kafka.common.Configurable;
import org.apache.kafka.connect.mirror.ReplicationPolicy;

public class PolicyNames {
    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 3 < args.length; i += 4) {
            ReplicationPolicy policy = (ReplicationPolicy) Class.forName("org.apache.kafka.connect.mirror." + args[i])
                .getDeclaredConstructor()
                .newInstance();
            String alias = args[i + 3];
            ((Configurable) policy).configure(Map.of(
                "replication.policy.separator", args[i + 1],
                "replication.policy.internal.topic.separator.enabled", args[i + 2],
                "source.cluster.alias", alias));
            System.out.println(String.join(
                "\t",
                policy.offsetSyncsTopic(alias),
                policy.checkpointsTopic(alias),
                policy.formatRemoteTopic(alias, "orders"),
                policy.formatRemoteTopic(alias, policy.heartbeatsTopic())));
        }
    }
}
