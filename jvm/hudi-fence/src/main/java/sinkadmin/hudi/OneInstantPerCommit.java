package sinkadmin.hudi;

import java.io.IOException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.hudi.client.transaction.ConcurrentOperation;
import org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy;
import org.apache.hudi.common.model.HoodieCommitMetadata;
import org.apache.hudi.common.table.HoodieTableMetaClient;
import org.apache.hudi.common.table.timeline.HoodieInstant;
import org.apache.hudi.common.util.Option;
import org.apache.hudi.exception.HoodieWriteConflictException;
import org.apache.hudi.table.HoodieTable;

/**
 * Hudi's optimistic concurrency check, and one rule more: a table holds each of the sink's commits (the
 * {@code sinkadmin.commit.id} of an instant's commit metadata) in one instant.
 *
 * <p>Why: the coordinator's write runs in the Spark Connect server, and a coordinator killed mid-write leaves
 * it running there. Its successor, rolling the same commit forward, finds no completed instant for it and
 * writes it again. Whichever of the two writes reaches Hudi's pre-commit check second finds the other's
 * completed instant with the same commit id and fails with a {@link HoodieWriteConflictException}, under
 * Hudi's lock, before completing its instant: the commit is in the table once. The successor, failed so,
 * finds the first's instant on the timeline and tells the ledger (sinks.hudi.commit).
 *
 * <p>Hudi's own strategy compares a write with the instants completed while it ran (their files); the
 * same-commit rule also looks at the instants completed before it started (a write of a commit that another
 * write completed while this one's client was on its way: the zombie's case).
 */
public class OneInstantPerCommit extends SimpleConcurrentFileWritesConflictResolutionStrategy {

  /** The key of the commit metadata that names the sink's commit (sinks.hudi.timeline.COMMIT_ID_KEY). */
  public static final String COMMIT_ID = "sinkadmin.commit.id";

  /** Instants offered for the same-commit rule only: completed before this write started. */
  private final Set<String> earlier = new HashSet<>();

  /** The completed instants offered, by requested time: their commit metadata is read from the timeline
   * (a ConcurrentOperation of a completed instant carries its files, not its metadata). */
  private final Map<String, HoodieInstant> completed = new HashMap<>();

  private HoodieTableMetaClient metaClient;

  @Override
  public Stream<HoodieInstant> getCandidateInstants(
      HoodieTableMetaClient metaClient, HoodieInstant currentInstant, Option<HoodieInstant> lastSuccessfulInstant) {
    this.metaClient = metaClient;
    List<HoodieInstant> concurrent =
        super.getCandidateInstants(metaClient, currentInstant, lastSuccessfulInstant).collect(Collectors.toList());
    Set<String> offered = concurrent.stream().map(HoodieInstant::requestedTime).collect(Collectors.toSet());
    String started = currentInstant.requestedTime();
    List<HoodieInstant> done =
        metaClient.reloadActiveTimeline().getCommitsTimeline().filterCompletedInstants().getInstantsAsStream()
            .filter(i -> !i.requestedTime().equals(started))
            .collect(Collectors.toList());
    done.forEach(i -> completed.put(i.requestedTime(), i));
    List<HoodieInstant> before = done.stream()
        .filter(i -> !offered.contains(i.requestedTime()))
        .filter(i -> i.getCompletionTime() != null && i.getCompletionTime().compareTo(started) < 0)
        .collect(Collectors.toList());
    before.forEach(i -> earlier.add(i.requestedTime()));
    return Stream.concat(concurrent.stream(), before.stream());
  }

  @Override
  public boolean hasConflict(ConcurrentOperation thisOperation, ConcurrentOperation otherOperation) {
    if (sameCommit(thisOperation, otherOperation)) {
      return true;
    }
    return !earlier.contains(otherOperation.getInstantTimestamp()) && super.hasConflict(thisOperation, otherOperation);
  }

  @Override
  public Option<HoodieCommitMetadata> resolveConflict(
      HoodieTable table, ConcurrentOperation thisOperation, ConcurrentOperation otherOperation) {
    if (sameCommit(thisOperation, otherOperation)) {
      throw new HoodieWriteConflictException(
          "sinkadmin commit " + commitId(thisOperation) + " is already instant " + otherOperation.getInstantTimestamp()
              + " of this table: instant " + thisOperation.getInstantTimestamp() + " would hold it twice");
    }
    return super.resolveConflict(table, thisOperation, otherOperation);
  }

  private boolean sameCommit(ConcurrentOperation thisOperation, ConcurrentOperation otherOperation) {
    String mine = commitId(thisOperation);
    return mine != null
        && !thisOperation.getInstantTimestamp().equals(otherOperation.getInstantTimestamp())
        && Objects.equals(mine, commitId(otherOperation));
  }

  private String commitId(ConcurrentOperation operation) {
    Option<HoodieCommitMetadata> metadata = operation.getCommitMetadataOption();
    if (metadata.isPresent()) {
      return metadata.get().getExtraMetadata().get(COMMIT_ID);
    }
    HoodieInstant instant = completed.get(operation.getInstantTimestamp());
    if (instant == null || metaClient == null) {
      return null;
    }
    try {
      return metaClient.getActiveTimeline().readCommitMetadata(instant).getExtraMetadata().get(COMMIT_ID);
    } catch (IOException e) {
      throw new HoodieWriteConflictException("cannot read the commit metadata of instant " + instant, e);
    }
  }
}
