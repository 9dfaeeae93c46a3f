"""The ledger's chain: each entry's hash and its predecessor's, and corrections as entries of their
own kind (a reason, who recorded it, several per job). The hashes are filled in by 0007."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_retention_policy'),
    ]

    operations = [
        migrations.AddField(
            model_name='ledgerentry',
            name='reason',
            field=models.TextField(blank=True, help_text='Why the operator made the correction (corrections).'),
        ),
        migrations.AddField(
            model_name='ledgerentry',
            name='recorded_by',
            field=models.CharField(blank=True, help_text='The operator who made the correction.', max_length=150),
        ),
        migrations.AddField(
            model_name='ledgerentry',
            name='previous_hash',
            field=models.CharField(blank=True, default='', editable=False, help_text="The organisation's previous entry's hash; empty first.", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='ledgerentry',
            name='hash',
            field=models.CharField(editable=False, max_length=64, null=True),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='kind',
            field=models.CharField(choices=[('hold', 'GPU hold'), ('staging', 'Staging'), ('correction', 'Correction')], max_length=10),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='gpus',
            field=models.PositiveIntegerField(help_text='0 for staging and corrections: no GPU is held then.'),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='held_from',
            field=models.DateTimeField(help_text="When the hold (or the staging) started; a correction's moment."),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='amount',
            field=models.DecimalField(decimal_places=4, help_text='Negative for a credit.', max_digits=14),
        ),
        migrations.RemoveConstraint(
            model_name='ledgerentry',
            name='one_entry_per_job_and_kind',
        ),
        migrations.AddConstraint(
            model_name='ledgerentry',
            constraint=models.UniqueConstraint(condition=models.Q(('kind', 'correction'), _negated=True), fields=('job', 'kind'), name='one_entry_per_job_and_kind'),
        ),
        migrations.AlterModelOptions(
            name='ledgerentry',
            options={'base_manager_name': 'objects', 'ordering': ['-held_to', '-pk'], 'verbose_name_plural': 'ledger entries'},
        ),
    ]
