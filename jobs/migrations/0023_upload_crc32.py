from django.db import migrations, models


class Migration(migrations.Migration):
    """The CRC-32 of an upload's confirmed bytes. Uploads begun before it have none (NULL): what they hold is
    not known, so a client starts them over rather than resume them."""

    dependencies = [
        ("jobs", "0022_jobevent_hold"),
    ]

    operations = [
        migrations.AddField(
            model_name="upload",
            name="crc32",
            field=models.PositiveBigIntegerField(
                null=True, help_text="The CRC-32 of the bytes confirmed; none for an upload begun before it was kept."
            ),
        ),
        migrations.AlterField(
            model_name="upload",
            name="crc32",
            field=models.PositiveBigIntegerField(
                null=True,
                default=0,
                help_text="The CRC-32 of the bytes confirmed; none for an upload begun before it was kept.",
            ),
        ),
    ]
