"""PartitionOffset.committed_offset: the end of the last COMMITTED commit (what readers see), beside
next_offset (the end of the last prepared one)."""

from django.db import migrations, models


def readable_offsets(apps, schema_editor):  # type: ignore[no-untyped-def]
    PartitionOffset = apps.get_model("connectors", "PartitionOffset")
    CommitPartition = apps.get_model("connectors", "CommitPartition")
    for row in PartitionOffset.objects.select_related("last_commit").iterator():
        committed = row.next_offset
        if row.last_commit is not None and row.last_commit.state == "PREPARED":
            # Its range is not readable yet: the partition's readers see up to where it starts.
            prepared = CommitPartition.objects.filter(
                commit=row.last_commit, topic=row.topic, partition=row.partition
            ).first()
            if prepared is not None:
                committed = prepared.start_offset
        row.committed_offset = committed
        row.save(update_fields=["committed_offset"])


class Migration(migrations.Migration):
    dependencies = [("connectors", "0012_maintenance_manifests")]

    operations = [
        migrations.AddField(
            model_name="partitionoffset",
            name="committed_offset",
            field=models.BigIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunPython(readable_offsets, migrations.RunPython.noop),
    ]
