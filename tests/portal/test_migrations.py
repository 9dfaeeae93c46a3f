from django.core.management import call_command


def test_it_has_a_migration_for_every_model_change(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
