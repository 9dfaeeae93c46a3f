from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0016_notified_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='allocation',
            name='runner',
            field=models.CharField(blank=True, help_text='The token of the slot task serving the hold; an older one stops.', max_length=32),
        ),
        migrations.AddField(
            model_name='allocation',
            name='runner_seen',
            field=models.DateTimeField(blank=True, help_text='When a slot task serving the hold was last sent or last reported.', null=True),
        ),
    ]
