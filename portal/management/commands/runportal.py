"""`manage.py runportal`: the whole portal in one terminal, as `make run` starts it.

Starts the embedded Redis (unless REDIS_URL is set), the GPU worker side, Celery beat and the web
server (gunicorn with gunicorn.conf.py, as `make serve`, on two workers and the files in static/ as
they are); Ctrl-C stops all of them. Django's runserver would answer each request about 40 ms late.
"""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal import embedded_redis
from portal.procs import Children, StopRequested


class Command(BaseCommand):
    help = "Run the portal, a GPU worker, beat and (by default) an embedded Redis together."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args, port, **options):
        socket_path = settings.VAR_DIR / "redis.sock"
        if settings.EMBEDDED_REDIS and embedded_redis.answers(socket_path):
            # Two Redis servers on one socket path: the first to stop deletes the other's socket.
            raise CommandError(
                f"Another portal is running on {settings.VAR_DIR} (its Redis answers on {socket_path}); "
                "stop it first, or set E31_VAR_DIR to run a second one."
            )
        stop = StopRequested()
        children = Children()
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        try:
            if settings.EMBEDDED_REDIS:
                data_dir = settings.VAR_DIR / "redis"
                data_dir.mkdir(exist_ok=True)
                children.start("redis", embedded_redis.server_argv(socket_path, data_dir))
                embedded_redis.wait_until_ready(socket_path)
                self.stdout.write(f"Redis (embedded) on {socket_path}")
            children.start("gpuworker", [*manage, "gpuworker"])
            beat_schedule = str(settings.VAR_DIR / "celerybeat-schedule")
            children.start(
                "beat",
                [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "WARNING", "-s", beat_schedule],
            )
            gunicorn = [sys.executable, "-m", "gunicorn", "--config", str(settings.BASE_DIR / "gunicorn.conf.py")]
            children.start("web", [*gunicorn, "--bind", f"127.0.0.1:{port}", "--workers", "2"])
            self.stdout.write(self.style.SUCCESS(f"The portal is on http://127.0.0.1:{port}/  (Ctrl-C stops it)"))
            while not stop.requested:
                for child in children.children:
                    if not child.alive:
                        self.stderr.write(
                            f"{child.name} stopped (exit {child.process.returncode}); stopping the portal"
                        )
                        stop.requested = True
                stop.sleep(1)
        finally:
            self.stdout.write("Stopping…")
            children.stop_all()
