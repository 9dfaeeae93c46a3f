from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0026_streaming_staging"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="source_parts",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="A dataset given as several locations, in order: each part's location (a URL's query wiped "
                "when staging ends), then once staged its bytes and SHA-256 as sent. Empty for one location; "
                "source_uri is the first.",
            ),
        ),
    ]
