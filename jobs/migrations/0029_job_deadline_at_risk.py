from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0028_job_input_compression"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="deadline_at_risk_finish",
            field=models.DateTimeField(
                blank=True,
                help_text="Its expected finish when it was told its deadline can no longer be met.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="deadline_at_risk_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("earlier_deadline", "a job with an earlier deadline, submitted after it, takes the GPUs first"),
                    ("fewer_gpus", "fewer GPUs free up in time than when it was submitted"),
                    ("slower", "its shards run slower than its request allowed for"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="deadline_at_risk_since",
            field=models.DateTimeField(
                blank=True,
                help_text="When a job told at submit that its deadline could be met was told it no longer can (once).",
                null=True,
            ),
        ),
    ]
