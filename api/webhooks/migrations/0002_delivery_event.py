from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0001_endpoints_and_deliveries"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="delivery",
            name="one_delivery_per_change",
        ),
        migrations.AddField(
            model_name="delivery",
            name="event",
            field=models.CharField(default="job.state_changed", help_text="What happened to the job.", max_length=32),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="state",
            field=models.CharField(help_text="The state the job entered, or was in when told.", max_length=10),
        ),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.UniqueConstraint(
                fields=("endpoint", "job", "event", "state", "changed_at"), name="one_delivery_per_event"
            ),
        ),
    ]
