from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0027_job_source_parts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="input_bytes",
            field=models.BigIntegerField(blank=True, help_text="The data's bytes as staged: uncompressed.", null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="input_sha256",
            field=models.CharField(blank=True, help_text="The SHA-256 of the data's bytes as sent.", max_length=64),
        ),
        migrations.AddField(
            model_name="job",
            name="input_compression",
            field=models.CharField(
                blank=True,
                help_text="gzip, zstd or bzip2 when the data came compressed; staged uncompressed.",
                max_length=5,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="sent_bytes",
            field=models.BigIntegerField(blank=True, help_text="The compressed data's bytes as sent.", null=True),
        ),
    ]
